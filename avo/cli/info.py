"""What is installed: ``targets``, ``backends``, ``plugins``, ``doctor``."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from avo.cli.common import JsonFlag, out, print_json, user_errors

if TYPE_CHECKING:
    from avo.models import TargetSpec


def _table(title: str, columns: list[str]):  # type: ignore[no-untyped-def]
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_lines=False)
    for c in columns:
        table.add_column(c, overflow="fold")
    return table


def register(app: typer.Typer) -> None:
    @app.command()
    def targets(json_out: JsonFlag = False) -> None:
        """Installed targets (plugin targets and folders on $AVO_TARGET_PATH)."""
        from avo.plugins import all_targets

        with user_errors():
            specs = all_targets()
            if json_out:
                print_json([s.model_dump(mode="json") for s in specs])
                return
            table = _table("targets", ["name", "provider", "direction", "entrypoint", "description"])
            for s in specs:
                table.add_row(s.name, s.provider or "", s.direction, s.entrypoint, s.description)
            out.print(table)
            out.print("A folder with a target.yaml works too: avo start --target ./my_target")

    @app.command()
    def backends(json_out: JsonFlag = False) -> None:
        """Installed agent backends for `avo evolve`, and whether each can run here."""
        from avo.plugins import all_backends

        with user_errors():
            infos = all_backends()
            if json_out:
                print_json([b.model_dump(mode="json") for b in infos])
                return
            table = _table("backends", ["name", "provider", "ready", "needs", "description"])
            for b in infos:
                ready = "yes" if b.available else f"no: {b.reason or ''}"
                table.add_row(b.name, b.provider or "", ready, ", ".join(b.needs), b.description)
            out.print(table)

    @app.command()
    def plugins(json_out: JsonFlag = False) -> None:
        """Every installed plugin: distribution, version and what it provides."""
        from dataclasses import asdict

        from avo.plugins import plugin_records

        with user_errors():
            records = plugin_records()
            if json_out:
                print_json([asdict(r) for r in records])
                return
            table = _table("plugins", ["name", "distribution", "version", "provides"])
            for r in records:
                provides = []
                if r.targets:
                    provides.append("targets: " + ", ".join(r.targets))
                if r.backends:
                    provides.append("backends: " + ", ".join(r.backends))
                provides.append("hooks: " + ", ".join(h.removeprefix("avo_") for h in r.hooks))
                if r.error:
                    provides = [f"FAILED TO LOAD: {r.error}"]
                table.add_row(r.name, r.distribution, r.version, "\n".join(provides))
            out.print(table)

    @app.command()
    def doctor(
        target: Annotated[str | None, typer.Option("--target", help="Check one target only.")] = None,
        executor_option: Annotated[list[str] | None, typer.Option(
            "--executor-option", help="Executor option KEY=VALUE for the executor checks.")] = None,
    ) -> None:
        """Check Python, git, a C compiler, each target's packages, each backend and each executor."""
        from avo.plugins import all_backends, all_targets

        problems = 0

        def line(ok: bool, what: str, fix: str = "") -> None:
            nonlocal problems
            if not ok:
                problems += 1
            mark = "[green]ok[/]  " if ok else "[red]MISSING[/]"
            out.print(f"{mark} {what}" + (f"\n        fix: {fix}" if fix and not ok else ""), markup=True)

        v = sys.version_info
        line(v >= (3, 10), f"Python {v.major}.{v.minor}.{v.micro} ({sys.executable})", "install Python 3.10 or newer")
        git = shutil.which("git")
        git_version = subprocess.run([git, "--version"], capture_output=True, text=True).stdout.strip() if git else ""
        line(git is not None, f"git: {git_version or 'not found'}", "install git (the lineage is a git repository)")
        cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        line(cc is not None, f"C compiler: {cc or 'not found'}",
             "install gcc or clang (needed by attention_c and by cffi builds)")
        with user_errors():
            specs = all_targets()
            for spec in specs:
                if target and spec.name != target:
                    continue
                missing = [m for m in spec.requirements if importlib.util.find_spec(m) is None]
                line(not missing, f"target {spec.name}: " + ("ready" if not missing else f"needs {', '.join(missing)}"),
                     f"pip install {' '.join(missing)}  (or install the target with its extras)")
            for info in all_backends():
                state = "ready" if info.available else f"not ready: {info.reason}"
                out.print(f"{'[green]ok[/]  ' if info.available else '[yellow]--[/]  '} backend {info.name}: {state}",
                          markup=True)
            _check_executors(line, next((s for s in specs if s.name == target), None), executor_option)
        out.print("all checks passed" if problems == 0 else f"{problems} problem(s) found")
        if problems:
            raise typer.Exit(1)


def _check_executors(line: Callable[..., None], spec: TargetSpec | None, pairs: list[str] | None) -> None:
    """Each installed executor's own check (a cluster reachable, the target's resources there)."""
    from avo import executors
    from avo.cli.common import key_values

    options = key_values(pairs, "--executor-option")
    for info in executors.all_executors():
        check = executors.check(info.name, spec, options)
        line(check.ok, f"executor {info.name}: " + ("; ".join(check.lines) or "ready"), "; ".join(check.problems))
