"""Core benchmark: a step's bookkeeping against git's own cost, start-up, cost as the run grows.

``python bench/core_bench.py REPORT.md`` appends a markdown section to REPORT.md. Every figure
is a ratio to something measured in the same run, interleaved (medians), never a constant: the
machine is shared and noisy. The floor for a submit's bookkeeping is a bare
``git add -A && git commit && git tag`` in a temporary repository; git processes per submit
are counted with a ``git`` wrapper put first where avo looks for programs (``avo.programs``)
that logs each call.

Cost as the run grows: runs of ``AVO_BENCH_SIZES`` versions (default ``10,1000,10000``) are
grown from a real start by :mod:`synthetic_run` (what accepted submits write, through one
``git fast-import``; the full record check must accept each), with trajectories of ten
records per version (100,000 at 10,000 versions). Every run is built first; then each
command is timed on all of them in turn, round after round (so a change of the shared
machine's load moves every size alike), and reported as a ratio to the smallest run.

``AVO_BENCH_ISLANDS`` (default: the cores, 2 to 4; 0 skips) and ``AVO_BENCH_ISLAND_STEPS``
(default 6) size the islands figure: a colony's steps against one run's, wall time.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent.parent
TOY = ROOT / "tests" / "fixtures" / "toy"
AVO = [sys.executable, "-m", "avo"]


def wall(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, float]:
    """(wall s, CPU s of the child and its children) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    elapsed = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def interleave(cmds: dict[str, list[str]], env: dict[str, str], rounds: int) -> dict[str, tuple[float, float]]:
    """Median (wall, cpu) of each command, run in turn ``rounds`` times."""
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    for _ in range(rounds):
        for k, cmd in cmds.items():
            samples[k].append(wall(cmd, env))
    return {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in samples.items()}


def git_shim(folder: Path) -> tuple[Path, Path]:
    """A ``git`` that logs each call's arguments, then runs the real git (put first in
    ``avo.programs.SYSTEM_DIRS``: avo never takes a program from the caller's PATH first)."""
    real = shutil.which("git")
    assert real, "git is not installed"
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "calls.log"
    shim = folder / "git"
    shim.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\nexec "{real}" "$@"\n')
    shim.chmod(0o755)
    return folder, log


def count_calls(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


class Floor:
    """A bare ``git add -A && git commit && git tag`` in a temporary repository of the toy seed."""

    def __init__(self, where: Path, env: dict[str, str]):
        self.repo = where
        shutil.copytree(TOY / "seed", where)
        self.env = {**env, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
                    "GIT_COMMITTER_EMAIL": "b@b"}
        subprocess.run(["git", "init", "-q"], cwd=where, env=self.env, check=True)
        self.n = 0

    def step(self) -> float:
        self.n += 1
        with open(self.repo / "solution.py", "a") as fh:
            fh.write(f"# floor {self.n}\n")
        t = time.perf_counter()
        subprocess.run(f"git add -A && git commit -q -m 'step {self.n}' && git tag v{self.n}", shell=True,
                       cwd=self.repo, env=self.env, check=True)
        return time.perf_counter() - t


def edit(run_work: Path, i: int, accept: bool) -> None:
    """Change the candidate: a comment (same score: accepted as a tie) or a bad X (rejected)."""
    sol = run_work / "solution.py"
    lines = sol.read_text().splitlines()
    if accept:
        lines.append(f"# step {i}")
    else:
        lines[2] = f"X = {-1000.0 - i}"
    sol.write_text("\n".join(lines) + "\n")


def submits(run_ref: Path, runs_root: Path, steps: int, floor: Floor | None, log: Path | None,
            accept_only: bool = False, first: int = 0) -> dict[str, list[float]]:
    """In-process submits (alternately accepted and rejected), each beside one floor commit;
    ``first`` numbers the edits on from an earlier call's (a repeated rejected diff stalls the run)."""
    from avo.engine import open_run, submit

    out: dict[str, list[float]] = {"overhead": [], "evaluator": [], "floor": [], "git_accept": [], "git_reject": []}
    for i in range(first, first + steps):
        run = open_run(str(run_ref), runs_root)
        accept = accept_only or i % 2 == 0
        edit(run.paths.work, i, accept)
        before = count_calls(log) if log else 0
        t = time.perf_counter()
        result = submit(run, f"step {i}")
        total = time.perf_counter() - t
        if log:
            out["git_accept" if result.outcome == "accepted" else "git_reject"].append(count_calls(log) - before)
        out["overhead"].append(total - result.evaluation.wall_s)
        out["evaluator"].append(result.evaluation.wall_s)
        if floor:
            out["floor"].append(floor.step())
    return out


READERS = ("avo status", "avo prompt", "avo log", "avo plot")


def reader_commands(run_dir: Path, plot_to: Path) -> dict[str, list[str]]:
    """The read-only commands timed on a run (and `avo --help` beside them)."""
    ref = ["--run", str(run_dir)]
    return {"avo --help": [*AVO, "--help"], "avo status": [*AVO, "status", *ref],
            "avo prompt": [*AVO, "prompt", *ref], "avo log": [*AVO, "log", *ref],
            "avo plot": [*AVO, "plot", *ref, "-o", str(plot_to)]}


def check_commands(cmds: dict[str, list[str]], env: dict[str, str], run_dir: Path) -> None:
    """A refusal would be timed as fast as an answer: each command must succeed first."""
    for k, cmd in cmds.items():
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{k} failed on {run_dir}: {done.stderr.strip()[-500:]}")


def cli_submit_beyond(run_dir: Path, env: dict[str, str], i: int) -> float:
    """One `avo submit` as a command on a run, its wall time beyond its evaluation."""
    edit(run_dir / "work", 10**6 + i, accept=True)
    t, _ = wall([*AVO, "submit", "-m", f"cli step {i}", "--run", str(run_dir)], env)
    last = json.loads((run_dir / "trajectory.jsonl").read_bytes().splitlines()[-1])
    if last.get("kind") != "submit" or last.get("outcome") != "accepted":
        raise SystemExit(f"avo submit did not record an accepted step on {run_dir}: {last}")
    return t - float(last.get("wall_s") or 0.0)


ISLAND_AGENT = """
import json, os, pathlib, re, time
time.sleep(0.5)  # an agent's step takes time of its own; islands overlap it
sol = pathlib.Path(os.environ["AVO_WORK_DIR"]) / "solution.py"
text = sol.read_text()
x = float(re.search(r"^X = (.*)$", text, re.M).group(1)) + 0.5
sol.write_text(re.sub(r"^X = .*$", f"X = {x}", text, flags=re.M))
print(json.dumps({"message": f"X to {x}"}))
"""


def islands_bench(tmp: Path, env: dict[str, str], n: int, steps: int) -> list[str]:
    """Wall time of ``avo evolve`` on a colony of ``n`` islands × ``steps`` against one run × ``steps``.

    Both are started first (not timed) and then driven by the same command, with a mock agent
    that sleeps 0.5 s per step and the toy evaluator; the colony migrates (ring, every 3 steps).
    """
    agent = tmp / "island_agent.py"
    agent.write_text(ISLAND_AGENT)
    bench_env = {**env, "AVO_MOCK_COMMAND": f"{sys.executable} {agent}", "AVO_MOCK_SUPERVISOR_COMMAND": "echo go on",
                 "AVO_RUNS_DIR": str(tmp / "island-runs")}
    runs = tmp / "island-runs"
    one_t = many_t = float("nan")
    for kind in ("one", "colony"):
        args = ["--islands", str(n)] if kind == "colony" else []
        subprocess.run([*AVO, "start", "--target", str(TOY), "--no-prompt", "--stall-limit", "1000", *args],
                       env=bench_env, check=True, capture_output=True)
        made = max((p for p in runs.iterdir() if not p.name.startswith(".")), key=lambda p: p.stat().st_mtime)
        w, _ = wall([*AVO, "evolve", "--resume", str(made), "--backend", "mock", "--max-steps", str(steps),
                     "--plain"], bench_env)
        if kind == "one":
            one_t = w
        else:
            many_t = w
    cores = os.cpu_count() or 1
    return [f"Islands: `avo evolve` on a colony of {n} islands × {steps} steps against one run × {steps} steps "
            f"({cores} cores here; an agent step of 0.5 s plus the toy evaluation).", "",
            "| measure | colony | one run | ratio | goal |", "| --- | --- | --- | --- | --- |",
            f"| wall time of the steps | {many_t:.1f} s ({n} × {steps} steps) | {one_t:.1f} s ({steps} steps) | "
            f"{many_t / one_t:.2f}× | → 1 for N ≤ cores |", ""]


def mcp_status_once(tools: Any, run_dir: Path) -> float:
    """Wall time of one call of the MCP server's ``avo_status`` tool (a warm server process)."""
    t = time.perf_counter()
    tools.status(run=str(run_dir))
    return time.perf_counter() - t


def prompt_size(run_dir: Path, env: dict[str, str]) -> tuple[int, int]:
    """(bytes, lineage table rows) of `avo prompt` on a run."""
    text = subprocess.run([*AVO, "prompt", "--run", str(run_dir)], env=env, capture_output=True, text=True,
                          check=True).stdout
    return len(text.encode()), sum(1 for line in text.splitlines() if re.match(r"\| v\d", line))


def grown(sizes: list[int], runs_root: Path, env: dict[str, str], tmp: Path) -> tuple[list[str], dict[int, dict]]:
    """Build a run of each size, then time every command on all of them interleaved (size after
    size within each round), so a change of the machine's load moves every size alike."""
    from synthetic_run import grow

    from avo.engine import open_run, start_run, submit
    from avo.mcp_server import AvoTools

    figures: dict[int, dict] = {}
    roots: dict[int, Path] = {}
    for n in sizes:
        t = time.perf_counter()
        run = start_run(str(TOY), runs_root, stall_limit=10**6)
        check_s = grow(run.paths.root, n, 10 * n)
        root = roots[n] = run.paths.root
        figures[n] = {"build_s": time.perf_counter() - t, "check_s": check_s,
                      "run.json": (root / "run.json").stat().st_size,
                      "trajectory": (root / "trajectory.jsonl").stat().st_size,
                      "lines": len((root / "trajectory.jsonl").read_bytes().splitlines())}
        print(f"size {n}: built {figures[n]}", flush=True)
    cmds = {n: reader_commands(roots[n], tmp / f"plot-{n}.png") for n in sizes}
    for n in sizes:
        check_commands(cmds[n], env, roots[n])
        figures[n]["prompt"] = prompt_size(roots[n], env)
    samples: dict[int, dict[str, list[float]]] = {n: {} for n in sizes}

    def add(n: int, key: str, value: float) -> None:
        samples[n].setdefault(key, []).append(value)

    for _ in range(5):
        for k in cmds[sizes[0]]:
            for n in sizes:
                add(n, k, wall(cmds[n][k], env)[0])
    tools = AvoTools(runs_root)
    for n in sizes:
        tools.status(run=str(roots[n]))  # warm: the server's imports and readers
    for _ in range(9):
        for n in sizes:
            add(n, "avo_status (MCP, warm server)", mcp_status_once(tools, roots[n]))
    for i in range(6):  # alternately accepted and rejected, each size in turn
        for n in sizes:
            run = open_run(str(roots[n]), runs_root)
            edit(run.paths.work, i, i % 2 == 0)
            t = time.perf_counter()
            result = submit(run, f"step {i}")
            add(n, "submit, in-process overhead", time.perf_counter() - t - result.evaluation.wall_s)
    for i in range(3):
        for n in sizes:
            add(n, "avo submit beyond its evaluation", cli_submit_beyond(roots[n], env, i))
    for n in sizes:
        figures[n].update({k: statistics.median(v) for k, v in samples[n].items()})
        print(f"size {n}: {figures[n]}", flush=True)
    small = sizes[0]
    keys = ["submit, in-process overhead", *READERS, "avo_status (MCP, warm server)",
            "avo submit beyond its evaluation"]
    head = " | ".join(f"{n:,} versions" for n in sizes)
    ratio_head = " | ".join(f"{n:,} / {small:,}" for n in sizes[1:])
    lines = [f"| command | {head} | {ratio_head} | goal |",
             "| --- | " + "--- | " * (len(sizes) * 2 - 1) + "--- |"]
    for k in keys:
        vals = " | ".join(f"{figures[n][k] * 1000:.0f} ms" for n in sizes)
        ratios = " | ".join(f"{figures[n][k] / figures[small][k]:.2f}×" for n in sizes[1:])
        lines.append(f"| `{k}` | {vals} | {ratios} | ≤ 1.2× |")
    lines += ["", "| run | versions | trajectory lines | run.json | trajectory.jsonl | built in | full record check "
              "(first, writes the checkpoint) | `avo prompt` |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for n in sizes:
        f = figures[n]
        lines.append(f"| {n:,} versions | {n:,} | {f['lines']:,} | {f['run.json'] / 1e6:.2f} MB | "
                     f"{f['trajectory'] / 1e6:.2f} MB | {f['build_s']:.1f} s | {f['check_s']:.2f} s | "
                     f"{f['prompt'][0]:,} bytes, {f['prompt'][1]} lineage rows |")
    return lines, figures


def byte_compiled(env: MutableMapping[str, str]) -> str:
    """Compile the repository's Python files once and let the timed commands keep their
    bytecode, as an installed package has it (pip compiles at install; Python caches on first
    import): with ``PYTHONDONTWRITEBYTECODE`` set, every timed start would compile avo from
    source while the typer it is compared with loads compiled. The report's line about it."""
    import compileall

    inherited = env.pop("PYTHONDONTWRITEBYTECODE", None)
    for folder in [ROOT / "avo", *(p.parent for p in ROOT.glob("*/pyproject.toml")),
                   *(p.parent for p in ROOT.glob("plugins/*/pyproject.toml"))]:
        compileall.compile_dir(str(folder), quiet=1, workers=1)
    return ("avo's modules were byte-compiled before timing, as an installed package's are"
            + (f" (this shell had PYTHONDONTWRITEBYTECODE={inherited}, unset for the timed commands)"
               if inherited is not None else "") + ".")


def main(report: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="avo-bench-"))
    sizes = [int(x) for x in os.environ.get("AVO_BENCH_SIZES", "10,1000,10000").split(",")]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    try:
        runs_root = tmp / "runs"
        shim_dir, log = git_shim(tmp / "shim")
        os.environ.update({"AVO_DISABLE_PLUGIN_AUTOLOAD": "1", "AVO_RUNS_DIR": str(runs_root)})
        compiled = byte_compiled(os.environ)
        env = dict(os.environ)
        # 1. Git calls per submit, counted by the shim; then in-process submits beside the bare
        # git floor, both without it (the shim is a shell process per git call: timed through
        # it, avo's submits paid it and the floor did not).
        import avo.programs
        from avo.engine import start_run

        system = avo.programs.SYSTEM_DIRS
        avo.programs.SYSTEM_DIRS = (str(shim_dir), *system)
        small = start_run(str(TOY), runs_root, stall_limit=10**6)
        counted = submits(small.paths.root, runs_root, 10, None, log)
        avo.programs.SYSTEM_DIRS = system
        steps = submits(small.paths.root, runs_root, 40, Floor(tmp / "floor", env), None, first=10)
        overhead, floor = statistics.median(steps["overhead"]), statistics.median(steps["floor"])
        # 2. Start-up: CPU of `avo --help` against importing typer alone.
        start = interleave({"python -c pass": [sys.executable, "-c", "pass"],
                            "python -c 'import typer'": [sys.executable, "-c", "import typer"],
                            "avo --help": [*AVO, "--help"]}, env, 15)
        # `avo targets` with every installed plugin loaded (routing, validation, conflicts).
        plugins_env = {k: v for k, v in env.items() if k != "AVO_DISABLE_PLUGIN_AUTOLOAD"}
        listing = interleave({"avo --help": [*AVO, "--help"], "avo targets": [*AVO, "targets"]}, plugins_env, 7)
        # 3. Every command on runs of each size (the smallest also gives the start-up rows).
        load_before = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else ["?"]
        growth, figures = grown(sizes, runs_root, env, tmp)
        at10 = figures[sizes[0]]
        help_w, help_cpu = start["avo --help"]
        cli_submit = at10["avo submit beyond its evaluation"]
        git_a, git_r = statistics.median(counted["git_accept"]), statistics.median(counted["git_reject"])
        evaluator = statistics.median(steps["evaluator"])
        typer_cpu = start["python -c 'import typer'"][1]
        lines = [
            "## core (avo)",
            "",
            "| measure | this run | measured beside it | ratio | goal |",
            "| --- | --- | --- | --- | --- |",
            f"| framework overhead per `submit`, in-process (median of {len(steps['overhead'])}) | "
            f"{overhead * 1000:.1f} ms | bare `git add -A && git commit && git tag` {floor * 1000:.1f} ms | "
            f"{overhead / floor:.2f}× | ≤ 50 ms and ≤ 2× |",
            f"| `avo submit` as a command, beyond its evaluation | {cli_submit * 1000:.0f} ms "
            f"| `avo --help` {at10['avo --help'] * 1000:.0f} ms | "
            f"{cli_submit / at10['avo --help']:.2f}× | ≤ 1.5× |",
            f"| git processes per `submit` (accepted / rejected, median) | "
            f"{git_a:.0f} / {git_r:.0f} | — | — | ≤ 4 |",
            f"| `avo --help` CPU | {help_cpu * 1000:.0f} ms | `python -c \"import typer\"` "
            f"{typer_cpu * 1000:.0f} ms | {help_cpu / typer_cpu:.2f}× | ≤ 1.5× |",
            f"| `avo status` (10 versions) | {at10['avo status'] * 1000:.0f} ms | `avo --help` "
            f"{at10['avo --help'] * 1000:.0f} ms | {at10['avo status'] / at10['avo --help']:.2f}× | ≤ 1.5× |",
            f"| `avo targets`, every installed plugin | {listing['avo targets'][0] * 1000:.0f} ms | `avo --help` "
            f"{listing['avo --help'][0] * 1000:.0f} ms | {listing['avo targets'][0] / listing['avo --help'][0]:.2f}× "
            "| no more than the first version's ratio |",
            "",
            f"`python -c pass` took {start['python -c pass'][0] * 1000:.0f} ms wall here; `avo --help` "
            f"{help_w * 1000:.0f} ms wall. The toy evaluator took {evaluator * 1000:.0f} ms "
            f"per call (subtracted above). {compiled}",
            "",
        ]
        lines += [
            "Cost as the run grows (runs grown by bench/synthetic_run.py, each accepted by the full record "
            "check; ten trajectory records per version; every size timed in turn within each round: medians "
            "of 5 rounds, in-process submits median of 6, MCP median of 9, `avo submit` median of 3):",
            "",
            *growth,
            "",
        ]
        islands = int(os.environ.get("AVO_BENCH_ISLANDS", str(max(2, min(4, os.cpu_count() or 1)))))
        if islands:
            lines += islands_bench(tmp, env, islands, int(os.environ.get("AVO_BENCH_ISLAND_STEPS", "6")))
        load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else ["?"]
        lines += [f"Started {started}; load average (1/5/15 min) {' '.join(load_before)} before the growth runs, "
                  f"{' '.join(load)} after; {os.cpu_count()} CPUs.", ""]
        with open(report, "a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        print("\n".join(lines))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "bench-report.md"))
