"""Options and output helpers shared by the command modules."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from avo.eval_env import SANDBOX

if TYPE_CHECKING:
    from rich.console import Console

RunsDir = Annotated[
    Path | None,
    typer.Option("--runs-dir", envvar="AVO_RUNS_DIR", help="Where runs live (default ./runs).", show_default=False),
]
class Enclosing(str):
    """A run reference taken from the current directory, not typed by the user."""


def enclosing_run(start: Path | None = None) -> Path | None:
    """The run folder that holds ``start`` (default: the current directory), if any.

    A command typed inside ``runs/ID/work/`` means that run, not ``work/runs``.
    """
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "run.json").is_file() and (folder / "work").is_dir():
            return folder
    return None


def _default_run(value: str | None) -> str | None:
    if value is not None:
        return value
    inside = enclosing_run()
    return Enclosing(inside) if inside is not None else None


RunRef = Annotated[
    str | None,
    typer.Option("--run", help="Run id or path (default: the run whose folder you are in, else the newest run).",
                 show_default=False, callback=_default_run),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
SandboxOpt = Annotated[str | None, typer.Option(
    "--sandbox", envvar=SANDBOX, show_default=False,
    help="Isolation of candidate code: auto (bubblewrap where it works, default), bwrap (required) or none.")]
ExecutorOpt = Annotated[str | None, typer.Option(
    "--executor", envvar="AVO_EXECUTOR", show_default=False,
    help="Where evaluations run: local (a child process here, default) or an installed executor (see `avo doctor`).")]
ExecutorOptionsOpt = Annotated[list[str] | None, typer.Option(
    "--executor-option", show_default=False, help="Executor option KEY=VALUE (repeatable), e.g. address=ray://head:10001.")]

EXIT_ERROR = 1
EXIT_BLOCKED = 3


class _LazyConsole:
    """The commands' rich console, made on first use: rich costs ~25 ms to import, which
    `avo --help` and commands that print plain text need not pay."""

    def __init__(self, **options: Any):
        self._options = options
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(highlight=False, soft_wrap=True, **self._options)
        return getattr(self._console, name)


out: Any = _LazyConsole()
err: Any = _LazyConsole(stderr=True)


def say(text: str, *, err: bool = False) -> None:
    """Print plain text as it is (no markup, no emoji codes) to stdout, or stderr with ``err``:
    most of what avo prints (rich is imported only for tables and coloured errors)."""
    print(text, file=sys.stderr if err else sys.stdout, flush=True)

F = TypeVar("F", bound=Callable[..., Any])


def shout(label: str, style: str, text: str) -> None:
    """``label`` in ``style``, then ``text`` exactly as it is, on stderr: a message with
    brackets in it (a path such as ``[/tmp/x]``, an index ``[0]``) is text, not rich markup,
    and ``:smile:`` is not an emoji code."""
    from rich.text import Text

    err.print(Text.assemble((label, style), " ", text))


@contextmanager
def user_errors(json_out: bool = False) -> Iterator[None]:
    """Print avo's errors as one clear message instead of a traceback; with ``json_out`` (a
    command's ``--json``) also as one JSON object on stdout, ``{"error", "kind", "exit"}``, so
    a machine client reading stdout learns why there is no result."""
    from avo.errors import AvoError, BlockedError

    def fail(kind: str, label: str, style: str, text: str, code: int) -> typer.Exit:
        shout(label, style, text)
        if json_out:
            print(json.dumps({"error": text, "kind": kind, "exit": code}), flush=True)
        return typer.Exit(code)

    try:
        yield
    except BlockedError as exc:
        raise fail("blocked", "blocked:", "bold yellow", str(exc), EXIT_BLOCKED) from None
    except AvoError as exc:
        raise fail("error", "error:", "bold red", str(exc), EXIT_ERROR) from None
    except OSError as exc:  # a path that is missing, unwritable or not a folder
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        raise fail("error", "error:", "bold red", f"{exc.strerror or exc}{where}", EXIT_ERROR) from None
    except KeyboardInterrupt:
        say("interrupted", err=True)
        if json_out:
            print(json.dumps({"error": "interrupted", "kind": "interrupted", "exit": 130}), flush=True)
        raise typer.Exit(130) from None


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def runs_root(runs_dir: Path | None) -> Path:
    from avo.state import runs_dir as resolve

    return resolve(runs_dir)


def key_values(pairs: list[str] | None, flag: str) -> dict[str, str]:
    """``{key: value}`` from repeated ``KEY=VALUE`` options, with a clear error for a bad one."""
    from avo.errors import AvoError

    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise AvoError(f"{flag} expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = value
    return out
