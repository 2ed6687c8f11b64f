"""What agent backends share: a child-process runner that kills a whole process group, and
the tool box (shell, view, create, str_replace, evaluate) of the self-contained agent loops.

Backends import this module; the core never imports a backend. Everything the agent does
is confined to the run's ``work/`` directory, and ``evaluate`` runs the run's own
``avo-eval`` (so every evaluation the agent asks for is recorded in the trajectory).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

OUTPUT_LIMIT = 12_000  # characters of tool output handed back to a model
SHELL_TIMEOUT = 300.0


@dataclass
class ProcessResult:
    """How a child process ended."""

    returncode: int | None
    stdout: str
    wall_s: float
    timed_out: bool = False


def kill_group(pgid: int) -> None:
    """SIGKILL a whole process group (the child and everything it spawned)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    timeout: float,
    log_path: Path,
    env: dict[str, str] | None = None,
    on_line: Callable[[str], None] | None = None,
    shell: bool = False,
) -> ProcessResult:
    """Run a child in its own process group, stream stdout to ``log_path`` (and ``on_line``).

    ``log_path`` is a file in a folder of avo's own (a run's ``logs/``): that folder is reached
    without following a link, and one found replaced by a link is set aside and made again.

    On a timeout, or when the caller is interrupted (Ctrl-C), the whole group is killed so no
    grandchild keeps running behind avo; the interrupt is then re-raised.
    """
    started = time.monotonic()
    from avo.regular_files import open_own

    # Never through a link: the agent can write logs/ and knows the next step's log name.
    with os.fdopen(open_own(log_path, append=True, own=1), "a", encoding="utf-8", errors="replace") as log:
        shown = argv[0] if shell else " ".join(argv)
        log.write(f"[avo] $ {shown[:2000]}\n[avo] cwd {cwd}\n")
        log.flush()
        proc = subprocess.Popen(
            argv[0] if shell else list(argv), shell=shell, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            text=True, errors="replace",
        )
        lines: list[str] = []
        assert proc.stdout is not None
        pump = threading.Thread(target=_pump, args=(proc.stdout, log, lines, on_line), daemon=True)
        pump.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        except BaseException:
            kill_group(proc.pid)
            proc.wait()
            raise
        kill_group(proc.pid)  # grandchildren would keep the pipe open
        proc.wait()
        pump.join(timeout=5)
        wall = time.monotonic() - started
        log.write(f"\n[avo] exit {proc.returncode}{' (timed out, group killed)' if timed_out else ''} "
                  f"after {wall:.2f}s\n")
    return ProcessResult(proc.returncode, "".join(lines), wall, timed_out)


def _pump(stream: IO[str], log: IO[str], lines: list[str], on_line: Callable[[str], None] | None) -> None:
    for line in stream:
        log.write(line)
        log.flush()
        lines.append(line)
        if on_line is not None:
            try:
                on_line(line)
            except Exception:  # a parse hiccup must not stop the pump (the pipe would fill)
                pass


def clip(text: str, limit: int = OUTPUT_LIMIT) -> str:
    """Keep the head and the tail of a long output, saying how much was cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… [{len(text) - limit} characters cut] …\n{text[-half:]}"


# -- the tool box of the self-contained agent loops (api, openai) ---------------------------

TOOL_SPECS: list[dict[str, Any]] = [
    {
        "name": "shell",
        "description": "Run a shell command (bash) in the work directory and return its exit status and "
                       "output (long output is clipped). Use it for git log/show/diff, grep, builds.",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command line."},
                "timeout": {"type": "number", "description": "Seconds before it is killed (default 300)."},
            },
            "required": ["command"],
        },
    },
    {
        "name": "view",
        "description": "Show a file of the work directory with line numbers (or list a directory).",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Path relative to the work directory."},
                "start": {"type": "integer", "description": "First line (1-based)."},
                "end": {"type": "integer", "description": "Last line (inclusive)."},
            },
            "required": ["path"],
        },
    },
    {
        "name": "create",
        "description": "Create or overwrite a file in the work directory with the given content.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
    {
        "name": "str_replace",
        "description": "Replace one exact, unique occurrence of old_str with new_str in a file.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "old_str": {"type": "string"},
                           "new_str": {"type": "string"}},
            "required": ["path", "old_str", "new_str"],
        },
    },
    {
        "name": "evaluate",
        "description": "Score the current work directory with the run's evaluator (avo-eval) and return "
                       "its short summary. avo re-scores on submit; this is for your own measurements.",
        "parameters": {"type": "object", "properties": {}},
    },
]


class ToolError(Exception):
    """A tool call the agent got wrong; its message goes back to the model."""


class ToolBox:
    """Executes tool calls, confined to ``work_dir``."""

    def __init__(self, work_dir: Path, avo_eval: Path, log_path: Path, *, shell_timeout: float = SHELL_TIMEOUT,
                 deadline: float | None = None, eval_timeout: float = 3600.0):
        self.work = work_dir.resolve()
        self.avo_eval = avo_eval
        self.log_path = log_path
        self.shell_timeout = shell_timeout
        self.deadline = deadline  # time.monotonic() past which no command may run
        self.evaluations = 0
        self.eval_timeout = eval_timeout

    def _timeout(self, asked: float | None) -> float:
        timeout = float(asked) if asked and asked > 0 else self.shell_timeout
        if self.deadline is not None:
            timeout = min(timeout, max(1.0, self.deadline - time.monotonic()))
        return timeout

    def _eval_timeout(self) -> float:
        # avo-eval enforces the target's own timeout; this only bounds a hung wrapper.
        timeout = self.eval_timeout + 60.0
        if self.deadline is not None:
            timeout = min(timeout, max(1.0, self.deadline - time.monotonic()))
        return timeout

    def _path(self, rel: Any) -> Path:
        if not isinstance(rel, str) or not rel.strip():
            raise ToolError("path must be a non-empty string relative to the work directory")
        path = (self.work / rel).resolve()
        if path != self.work and self.work not in path.parents:
            raise ToolError(f"{rel!r} is outside the work directory; only files in work/ may be touched")
        if ".git" in path.relative_to(self.work).parts:
            raise ToolError("the lineage in .git is read through git commands, not edited")
        return path

    def call(self, name: str, args: dict[str, Any]) -> str:
        """Run one tool call and return its text result (errors are results too)."""
        try:
            handler = getattr(self, f"_tool_{name}", None)
            if handler is None:
                raise ToolError(f"unknown tool {name!r}; tools: {', '.join(t['name'] for t in TOOL_SPECS)}")
            return str(handler(**args))
        except ToolError as exc:
            return f"error: {exc}"
        except TypeError as exc:
            return f"error: bad arguments for {name}: {exc}"
        except OSError as exc:
            return f"error: {exc}"

    def _tool_shell(self, command: str, timeout: float | None = None) -> str:
        if not isinstance(command, str) or not command.strip():
            raise ToolError("command must be a non-empty string")
        res = run_process([command], cwd=self.work, timeout=self._timeout(timeout), log_path=self.log_path,
                          shell=True)
        status = "timed out (killed)" if res.timed_out else f"exit {res.returncode}"
        return f"[{status}]\n{clip(res.stdout)}"

    def _tool_view(self, path: str, start: int | None = None, end: int | None = None) -> str:
        p = self._path(path)
        if p.is_dir():
            entries = sorted(x.name + ("/" if x.is_dir() else "") for x in p.iterdir() if x.name != ".git")
            return "\n".join(entries) or "(empty directory)"
        if not p.is_file():
            raise ToolError(f"{path} does not exist")
        lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
        lo = max(1, int(start or 1))
        hi = min(len(lines), int(end or len(lines)))
        return clip("\n".join(f"{i:5d}  {lines[i - 1]}" for i in range(lo, hi + 1)) or "(empty file)")

    def _tool_create(self, path: str, content: str) -> str:
        p = self._path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content, encoding="utf-8")
        return f"wrote {p.relative_to(self.work)} ({len(content)} characters)"

    def _tool_str_replace(self, path: str, old_str: str, new_str: str) -> str:
        p = self._path(path)
        if not p.is_file():
            raise ToolError(f"{path} does not exist")
        text = p.read_text(encoding="utf-8")
        count = text.count(old_str) if old_str else 0
        if count != 1:
            raise ToolError(f"old_str occurs {count} times in {path}; it must occur exactly once")
        p.write_text(text.replace(old_str, new_str, 1), encoding="utf-8")
        return f"edited {p.relative_to(self.work)}"

    def _tool_evaluate(self) -> str:
        self.evaluations += 1
        res = run_process([str(self.avo_eval)], cwd=self.work, timeout=self._eval_timeout(),
                          log_path=self.log_path)
        status = "timed out (killed)" if res.timed_out else f"exit {res.returncode}"
        return f"[{status}]\n{clip(res.stdout, 4000)}"


def openai_tools() -> list[dict[str, Any]]:
    """The tool box in the chat-completions ``tools`` format."""
    return [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                              "parameters": t["parameters"]}} for t in TOOL_SPECS]


def anthropic_tools() -> list[dict[str, Any]]:
    """The tool box in the Messages API ``tools`` format."""
    return [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
            for t in TOOL_SPECS]


AGENT_SYSTEM = """You are the variation operator of an evolutionary search run by avo.
Each step you improve one program in the work directory. Use the tools: read the lineage
with git (`git log --oneline`, `git show vN:FILE`), read the knowledge base, edit files with
create/str_replace, and call evaluate as often as you need. Edit only inside the work
directory. When you are done, stop calling tools and reply with ONE line: what you changed
and why (it becomes the commit message). avo scores the work tree itself after you stop."""


def summary_line(text: str, fallback: str) -> str:
    """The agent's one-line summary from its final text."""
    for line in reversed(text.strip().splitlines()):
        if line.strip():
            return line.strip()[:300]
    return fallback
