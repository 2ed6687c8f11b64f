"""What is installed: ``targets``, ``backends``, ``plugins``, ``doctor``."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from avo.cli.common import JsonFlag, out, print_json, say, shout, user_errors

if TYPE_CHECKING:
    from avo.models import TargetSpec


def _table(title: str, columns: list[str]):  # type: ignore[no-untyped-def]
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_lines=False)
    for c in columns:
        table.add_column(c, overflow="fold")
    return table


def _conflicts(conflicts: dict[str, str]) -> None:
    for message in conflicts.values():
        shout("conflict:", "bold red", message)


def visible_gpus() -> list[str]:
    """NVIDIA GPUs this machine shows (driver's /proc entries, else device nodes); no imports.

    Enough for ``avo doctor`` to say whether a target that declares ``resources.gpus`` can
    run here; the target's own evaluation says which device it actually got.
    """
    from pathlib import Path

    found = []
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        try:
            model = next((ln.split(":", 1)[1].strip() for ln in info.read_text().splitlines()
                          if ln.startswith("Model:")), "NVIDIA GPU")
        except OSError:
            model = "NVIDIA GPU"
        found.append(f"{model} ({info.parent.name})")
    if not found:
        found = [p.name for p in sorted(Path("/dev").glob("nvidia[0-9]*"))]
    return found


def register(app: typer.Typer) -> None:
    @app.command()
    def targets(json_out: JsonFlag = False) -> None:
        """Installed targets (plugin targets and folders on $AVO_TARGET_PATH)."""
        from avo.plugins import announced_targets

        with user_errors(json_out):
            specs, conflicts = announced_targets()
            if json_out:
                print_json([s.model_dump(mode="json") for s in specs])
                return
            from rich.markup import escape

            table = _table("targets", ["name", "provider", "direction", "entrypoint", "description"])
            for s in specs:
                table.add_row(*(escape(t) for t in (s.name, s.provider or "", s.direction, s.entrypoint,
                                                    s.description)))
            out.print(table)
            _conflicts(conflicts)
            out.print("A folder with a target.yaml works too: avo start --target ./my_target")

    @app.command()
    def backends(json_out: JsonFlag = False) -> None:
        """Installed agent backends for `avo evolve`, and whether each can run here."""
        from avo.plugins import announced_backends

        with user_errors(json_out):
            infos, conflicts = announced_backends()
            if json_out:
                print_json([b.model_dump(mode="json") for b in infos])
                return
            from rich.markup import escape

            table = _table("backends", ["name", "provider", "ready", "needs", "description"])
            for b in infos:
                ready = "yes" if b.available else f"no: {b.reason or ''}"
                # Plugin text is not markup: an install hint like 'avo-backend-x[sdk]' must print whole.
                table.add_row(*(escape(t) for t in (b.name, b.provider or "", ready, ", ".join(b.needs),
                                                    b.description)))
            out.print(table)
            _conflicts(conflicts)

    @app.command()
    def plugins(json_out: JsonFlag = False) -> None:
        """Every installed plugin: distribution, version, what it provides and what is wrong with it."""
        from dataclasses import asdict

        from avo.plugins import plugin_records

        with user_errors(json_out):
            records = plugin_records()
            if json_out:
                print_json([asdict(r) for r in records])
                return
            table = _table("plugins", ["name", "distribution", "version", "provides"])
            for r in records:
                provides = []
                if r.disabled:
                    provides.append("disabled ($AVO_DISABLE_PLUGINS)")
                if r.error:
                    provides.append(f"FAILED: {r.error}")
                if r.targets:
                    provides.append("targets: " + ", ".join(r.targets))
                if r.backends:
                    provides.append("backends: " + ", ".join(r.backends))
                if r.hooks:
                    provides.append("hooks: " + ", ".join(h.removeprefix("avo_") for h in r.hooks))
                provides.extend(f"PROBLEM: {p}" for p in r.problems)
                table.add_row(r.name, r.distribution, r.version, "\n".join(provides))
            out.print(table)
            bad = sum(1 for r in records if r.error or r.problems)
            if bad:
                say(f"{bad} plugin(s) failed or have problems; see FAILED / PROBLEM above", err=True)

    @app.command()
    def doctor(
        target: Annotated[str | None, typer.Option("--target", help="Check one target only.")] = None,
        executor_option: Annotated[list[str] | None, typer.Option(
            "--executor-option", help="Executor option KEY=VALUE for the executor checks.")] = None,
    ) -> None:
        """Check Python, git, a C compiler, the sandbox, the installed plugins, each target's packages, each
        backend and each executor."""
        from rich.markup import escape

        from avo.plugins import all_backends, announced_targets, find_target, plugin_records

        problems = 0

        def line(ok: bool, what: str, fix: str = "", bad: str = "MISSING") -> None:
            nonlocal problems
            if not ok:
                problems += 1
            mark = "[green]ok[/]  " if ok else f"[red]{bad}[/]"
            text = escape(what) + (f"\n        fix: {escape(fix)}" if fix and not ok else "")
            out.print(f"{mark} {text}", markup=True)

        v = sys.version_info
        line(v >= (3, 10), f"Python {v.major}.{v.minor}.{v.micro} ({sys.executable})", "install Python 3.10 or newer")
        from avo.programs import find

        git = find("git")  # where avo and its evaluators look: the system's folders first
        git_version = subprocess.run([git, "--version"], capture_output=True, text=True).stdout.strip() if git else ""
        line(git is not None, f"git: {git_version or 'not found'}" + (f" ({git})" if git else ""),
             "install git (the lineage is a git repository)")
        cc = find("cc") or find("gcc") or find("clang")
        line(cc is not None, f"C compiler: {cc or 'not found'}",
             "install gcc or clang (needed by attention_c and by cffi builds)")
        from avo.sandbox import probe

        sandboxed, why = probe()
        line(sandboxed, f"sandbox: {why}" if sandboxed else f"sandbox: {why}; candidates would run unisolated",
             "install bubblewrap (./install.sh does it on Debian/Ubuntu), or accept `--sandbox none` knowingly")
        from avo.distribution import CORE_DISTRIBUTION, foreign_avo

        foreign = foreign_avo()
        line(foreign is None, f"distribution: {CORE_DISTRIBUTION}" if foreign is None else foreign.split(";")[0],
             foreign.split("Fix: ")[-1] if foreign else "")
        gpus: list[str] | None = None  # looked up once, only if a target needs one
        with user_errors():
            seen: set[str] = set()
            for r in plugin_records():
                if r.disabled:
                    out.print(f"[yellow]--[/]   plugin {r.name} ({r.distribution}): disabled by $AVO_DISABLE_PLUGINS",
                              markup=True)
                    continue
                if r.error:
                    line(False, f"plugin {r.name} ({r.distribution}): {r.error}",
                         f"fix the plugin (or tell its author), or uninstall it: pip uninstall {r.distribution}",
                         bad="FAILED ")
                for problem in r.problems:
                    if " is announced " in problem:  # a conflict: said once, for both sides
                        if problem not in seen:
                            seen.add(problem)
                            line(False, problem, "uninstall or disable one of them (see above)", bad="CONFLICT")
                        continue
                    line(False, f"plugin {r.name} ({r.distribution}): {problem}",
                         f"fix the plugin (or tell its author), or uninstall it: pip uninstall {r.distribution}",
                         bad="PROBLEM")
            specs, conflicts = announced_targets()
            if target and not any(spec.name == target for spec in specs):
                specs = [find_target(target)]  # a folder given by path is checked like one on $AVO_TARGET_PATH
            for spec in specs:
                if target and spec.name != target and len(specs) > 1:
                    continue
                missing = [m for m in spec.requirements if importlib.util.find_spec(m) is None]
                line(not missing, f"target {spec.name}: " + ("ready" if not missing else f"needs {', '.join(missing)}"),
                     f"pip install {' '.join(missing)}  (or install the target with its extras)")
                if spec.resources.gpus:
                    gpus = visible_gpus() if gpus is None else gpus
                    kind = spec.resources.accelerator or "any"
                    need = f"target {spec.name}: needs {spec.resources.gpus:g} GPU(s) ({kind})"
                    if gpus:
                        line(True, f"{need}; visible: {', '.join(gpus)}")
                    elif target:  # asked about this target: a missing GPU is a problem
                        line(False, f"{need}; none visible here", "run it on a machine with an NVIDIA GPU and driver")
                    else:  # other targets still work on this machine
                        out.print(f"[yellow]--[/]   {need}; none visible here (no /proc/driver/nvidia, "
                                  "no /dev/nvidia*): its full evaluation will refuse to run", markup=True)
            if target and target in conflicts:
                line(False, f"target {target}: conflict", "uninstall or disable one of the two")
            for info in all_backends():
                state = "ready" if info.available else f"not ready: {info.reason}"
                out.print(f"{'[green]ok[/]  ' if info.available else '[yellow]--[/]  '} "
                          f"{escape(f'backend {info.name}: {state}')}", markup=True)
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
