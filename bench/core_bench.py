"""Core benchmark: a step's bookkeeping against git's own cost, start-up, cost as the run grows.

``python bench/core_bench.py REPORT.md`` appends a markdown section to REPORT.md. Every figure
is a ratio to something measured in the same run, interleaved (medians), never a constant: the
machine is shared and noisy. The floor for a submit's bookkeeping is a bare
``git add -A && git commit && git tag`` in a temporary repository; git processes per submit
are counted with a ``git`` wrapper first on ``PATH`` that logs each call.

``AVO_BENCH_ISLANDS`` (default: the cores, 2 to 4; 0 skips) and ``AVO_BENCH_ISLAND_STEPS``
(default 6) size the islands figure: a colony's steps against one run's, wall time.

``AVO_BENCH_BIG`` sets the size of the large run (default 1000 versions, built with real
submits; 0 skips it). Its trajectory is padded to ``AVO_BENCH_RECORDS`` records (default
100,000) with chained ``eval`` records, as ``avo eval`` writes them.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
    """A ``git`` first on PATH that logs each call's arguments, then runs the real git."""
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
            accept_only: bool = False) -> dict[str, list[float]]:
    """In-process submits (alternately accepted and rejected), each beside one floor commit."""
    from avo.engine import open_run, submit

    out: dict[str, list[float]] = {"overhead": [], "evaluator": [], "floor": [], "git_accept": [], "git_reject": []}
    for i in range(steps):
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


def pad_trajectory(run_dir: Path, total: int) -> int:
    """Append chained ``eval`` records (as ``avo eval`` writes them) until the trajectory has ``total``."""
    from avo.chain import line_hash
    from avo.state import ChainHead, RunPaths, _set_head, load_state

    paths = RunPaths(run_dir)
    state = load_state(paths)
    data = paths.trajectory.read_bytes()
    lines = data.splitlines()
    last = json.loads(lines[-1])
    seq, prev = last["seq"], line_hash(lines[-1])
    tree = state.best_version.tree
    added = []
    for _ in range(len(lines), total):
        seq += 1
        rec = {"time": round(time.time(), 3), "kind": "eval", "id": f"eval{state.evaluations + 1}",
               "step": state.steps + 1, "tree": tree, "correct": True, "scalar": state.best_version.scalar,
               "metrics": state.best_version.metrics, "error": None, "gain_vs_best": 0.0, "wall_s": 0.1,
               "log": "x.log", "warning": None, "screening": False, "sandbox": state.sandbox,
               "seq": seq, "prev": prev}
        state.evaluations += 1
        line = json.dumps(rec).encode()
        prev = line_hash(line)
        added.append(line)
    with open(paths.trajectory, "ab") as fh:
        fh.write(b"".join(line + b"\n" for line in added))
    raw = json.loads(paths.run_json.read_text())
    raw["evaluations"] = state.evaluations
    paths.run_json.write_text(json.dumps(raw, indent=1))
    _set_head(paths, ChainHead(count=len(lines) + len(added), sha=prev))
    return len(lines) + len(added)


def command_costs(run_dir: Path, env: dict[str, str], rounds: int) -> dict[str, float]:
    """Median wall time of the read-only commands on a run, and of one `avo submit` beyond its evaluation."""
    ref = ["--run", str(run_dir)]
    cmds = {"avo --help": [*AVO, "--help"], "avo status": [*AVO, "status", *ref],
            "avo prompt": [*AVO, "prompt", *ref], "avo log": [*AVO, "log", *ref]}
    for k, cmd in cmds.items():  # a refusal would be timed as fast as an answer: each must succeed
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{k} failed on {run_dir}: {done.stderr.strip()[-500:]}")
    out = {k: w for k, (w, _) in interleave(cmds, env, rounds).items()}
    beyond = []
    for i in range(max(3, rounds // 2)):
        edit(run_dir / "work", 10**6 + i, accept=True)
        t, _ = wall([*AVO, "submit", "-m", f"cli step {i}", *ref], env)
        last = json.loads((run_dir / "trajectory.jsonl").read_bytes().splitlines()[-1])
        if last.get("kind") != "submit" or last.get("outcome") != "accepted":
            raise SystemExit(f"avo submit did not record an accepted step on {run_dir}: {last}")
        last = json.loads((run_dir / "trajectory.jsonl").read_bytes().splitlines()[-1])
        beyond.append(t - float(last.get("wall_s") or 0.0))
    out["avo submit beyond its evaluation"] = statistics.median(beyond)
    return out


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


def main(report: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="avo-bench-"))
    big_n = int(os.environ.get("AVO_BENCH_BIG", "1000"))
    records = int(os.environ.get("AVO_BENCH_RECORDS", "100000"))
    try:
        runs_root = tmp / "runs"
        shim_dir, log = git_shim(tmp / "shim")
        os.environ.update({"AVO_DISABLE_PLUGIN_AUTOLOAD": "1", "AVO_RUNS_DIR": str(runs_root)})
        env = dict(os.environ)
        from avo.engine import start_run

        # 1. In-process submits beside the bare git floor, git calls counted by the shim.
        os.environ["PATH"] = f"{shim_dir}{os.pathsep}{os.environ['PATH']}"
        small = start_run(str(TOY), runs_root, stall_limit=10**6)
        steps = submits(small.paths.root, runs_root, 40, Floor(tmp / "floor", env), log)
        os.environ["PATH"] = env["PATH"]
        overhead, floor = statistics.median(steps["overhead"]), statistics.median(steps["floor"])
        # 2. Start-up: CPU of `avo --help` against importing typer alone.
        start = interleave({"python -c pass": [sys.executable, "-c", "pass"],
                            "python -c 'import typer'": [sys.executable, "-c", "import typer"],
                            "avo --help": [*AVO, "--help"]}, env, 15)
        # `avo targets` with every installed plugin loaded (routing, validation, conflicts).
        plugins_env = {k: v for k, v in env.items() if k != "AVO_DISABLE_PLUGIN_AUTOLOAD"}
        listing = interleave({"avo --help": [*AVO, "--help"], "avo targets": [*AVO, "targets"]}, plugins_env, 7)
        # 3. Commands at 10 versions vs a big run.
        ten = start_run(str(TOY), runs_root, stall_limit=10**6)
        submits(ten.paths.root, runs_root, 9, None, None, accept_only=True)
        at10 = command_costs(ten.paths.root, env, 9)
        big: dict[str, float] = {}
        sub_big = sub_10 = float("nan")
        build_s = 0.0
        if big_n:
            t = time.perf_counter()
            grown = start_run(str(TOY), runs_root, stall_limit=10**6)
            submits(grown.paths.root, runs_root, big_n - 1, None, None, accept_only=True)
            build_s = time.perf_counter() - t
            n_records = pad_trajectory(grown.paths.root, records)
            big = command_costs(grown.paths.root, env, 9)
            sub_10 = statistics.median(submits(ten.paths.root, runs_root, 9, None, None)["overhead"])
            sub_big = statistics.median(submits(grown.paths.root, runs_root, 9, None, None)["overhead"])
        help_w, help_cpu = start["avo --help"]
        cli_submit = at10["avo submit beyond its evaluation"]
        git_a, git_r = statistics.median(steps["git_accept"]), statistics.median(steps["git_reject"])
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
            "per call (subtracted above).",
            "",
        ]
        if big:
            lines += [
                f"Cost as the run grows: a run of 10 versions against one of {big_n:,} versions (built with real "
                f"submits in {build_s:.0f} s) whose trajectory holds {n_records:,} records.",
                "",
                f"| command | 10 versions | {big_n:,} versions | ratio | goal |",
                "| --- | --- | --- | --- | --- |",
                f"| `submit`, in-process overhead | {sub_10 * 1000:.1f} ms | {sub_big * 1000:.1f} ms | "
                f"{sub_big / sub_10:.2f}× | ≤ 1.2× |",
                *(f"| `{k}` | {at10[k] * 1000:.0f} ms | {big[k] * 1000:.0f} ms | {big[k] / at10[k]:.2f}× | ≤ 1.2× |"
                  for k in ("avo status", "avo prompt", "avo log", "avo submit beyond its evaluation")),
                "",
            ]
        islands = int(os.environ.get("AVO_BENCH_ISLANDS", str(max(2, min(4, os.cpu_count() or 1)))))
        if islands:
            lines += islands_bench(tmp, env, islands, int(os.environ.get("AVO_BENCH_ISLAND_STEPS", "6")))
        load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else ["?"]
        lines += [f"Load average after the run: {' '.join(load)}.", ""]
        with open(report, "a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        print("\n".join(lines))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "bench-report.md"))
