"""The Ray executor against a real two-node Ray cluster on 127.0.0.1 (see conftest.py)."""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import pytest
from avo_executor_ray.cluster import _fits
from conftest import Cluster

from avo import executors
from avo.engine import evaluate_work, start_run, submit
from avo.errors import AvoError, IntegrityError
from avo.models import TargetResources
from avo.plugins import find_target, reset_plugin_manager
from avo.state import read_trajectory

GOOD = "X = {x}\nY = 3.0\n\ndef square(n):\n    return n * n\n"
SLEEPY = "import time\ntime.sleep({s})\nX = {x}\nY = 3.0\n\ndef square(n):\n    return n * n\n"


def _set_timeout(toy: Path, seconds: int) -> None:
    spec = toy / "target.yaml"
    text = spec.read_text()
    assert "  timeout: 60s\n" in text
    spec.write_text(text.replace("  timeout: 60s\n", f"  timeout: {seconds}s\n", 1))


def _cmdlines() -> dict[int, str]:
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
    return out


def _ray_eval_workers() -> list[int]:
    """Ray workers running an evaluation task right now (their title is ray::avo_eval)."""
    return [pid for pid, cmd in _cmdlines().items() if cmd.startswith("ray::avo_eval")]


def _evaluators() -> list[int]:
    """The toy evaluator children running on a Ray node (from a job's private folder)."""
    return [pid for pid, cmd in _cmdlines().items()
            if "eval.py --workdir" in cmd and "avo-ray-" in cmd and not cmd.startswith("bwrap")]


def _wait_for(predicate, what: str, limit: float = 120.0):  # type: ignore[no-untyped-def]
    end = time.monotonic() + limit
    while time.monotonic() < end:
        got = predicate()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"never saw {what}")


def test_a_full_session_on_the_toy_target_runs_through_ray(ray_env: Cluster, toy: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run = start_run(str(toy), runs, executor="ray")
    assert run.state.options.executor == "ray"
    saved = json.loads(run.paths.run_json.read_text())
    assert saved["options"]["executor"] == "ray"
    assert {b.name for b in run.state.baselines} == {"zeros", "midpoint"}
    assert all(b.correct for b in run.state.baselines)
    seed = next(r for r in read_trajectory(run.paths) if r.get("id") == "seed")
    assert seed["where"].startswith("ray ")

    (run.paths.work / "solution.py").write_text(GOOD.format(x=6.5))
    report = evaluate_work(run)
    assert report.evaluation.scalar is not None and report.gain is not None and report.gain > 0
    assert report.evaluation.where is not None and report.evaluation.where.startswith("ray ")
    better = submit(run, "X closer to its optimum")
    assert better.outcome == "accepted" and better.version is not None
    (run.paths.work / "solution.py").write_text(GOOD.format(x=1.0))
    worse = submit(run, "X far away")
    assert worse.outcome == "rejected"
    (run.paths.work / "solution.py").write_text("def square(n):\n    return n + n\nX = 7.0\nY = 3.0\n")
    wrong = submit(run, "a broken square")
    assert wrong.outcome == "failed" and "square" in (wrong.evaluation.result.error or "")
    records = [r for r in read_trajectory(run.paths) if r.get("kind") == "submit"]
    assert [r["outcome"] for r in records] == ["accepted", "rejected", "failed"]
    assert all(r["where"].startswith("ray ") for r in records)
    # The same tree on the local executor scores the same: the result is the same object.
    (run.paths.work / "solution.py").write_text(GOOD.format(x=6.5))
    here = evaluate_work(run, executor="local")
    assert here.evaluation.result == better.evaluation.result
    assert here.evaluation.where is not None and here.evaluation.where.startswith("local ")


def _job_for(target: str, folder: Path, secret: str) -> object:
    from avo.evaluator_copy import evaluator_source, runtime_hashes
    from avo.integrity import hash_tree

    spec = find_target(target)
    root, exclude, module = evaluator_source(spec)
    return executors.make_job(spec, "seed", snapshot=folder, quick=True, evaluator_hashes=hash_tree(root, exclude),
                              runtime_hashes=runtime_hashes(module is not None), sandbox="none", secret=secret)


def test_game2048_seed_quick_scores_bit_identically_through_ray_and_locally(ray_env: Cluster, tmp_path: Path) -> None:
    from avo.plugins import call_target_hook

    spec = find_target("game2048")
    seed = tmp_path / "seed"
    seed.mkdir()
    call_target_hook(spec, "avo_seed", dest=seed)  # only the target's own plugin writes it
    assert (seed / spec.entrypoint).is_file()
    job = _job_for("game2048", seed, "a-fixed-secret")
    local = executors.execute("local", job, {})  # type: ignore[arg-type]
    remote = executors.execute("ray", job, {})  # type: ignore[arg-type]
    assert local.result is not None and local.result.correct, local.log[-2000:]
    assert remote.result is not None and remote.result.correct, remote.log[-2000:]
    # Every field bit for bit, but the notes: they report the player's speed (CPU s, wall s).
    assert remote.result.model_dump(exclude={"notes"}) == local.result.model_dump(exclude={"notes"})
    assert remote.result.metrics and all(type(v) is float for v in remote.result.metrics.values())
    assert remote.executor == "ray" and remote.node and local.executor == "local"


def test_a_hanging_evaluator_is_killed_at_its_timeout_through_ray(ray_env: Cluster, toy: Path,
                                                                 tmp_path: Path) -> None:
    _set_timeout(toy, 4)
    run = start_run(str(toy), tmp_path / "runs", executor="ray")
    (run.paths.work / "solution.py").write_text(SLEEPY.format(s=600, x=6.5))
    hung = submit(run, "sleeps forever")
    assert hung.outcome == "failed"
    assert "timed out" in (hung.evaluation.result.error or "") or "timeout" in (hung.evaluation.result.error or "")
    assert "did not answer" not in (hung.evaluation.result.error or "")  # the in-task timeout, not the driver's
    (run.paths.work / "solution.py").write_text(GOOD.format(x=6.5))
    assert submit(run, "back to work").outcome == "accepted"  # the run goes on


def test_a_worker_killed_mid_evaluation_is_a_failed_evaluation_and_the_run_goes_on(
        ray_env: Cluster, toy: Path, tmp_path: Path) -> None:
    run = start_run(str(toy), tmp_path / "runs", executor="ray", sandbox="none")
    (run.paths.work / "solution.py").write_text(SLEEPY.format(s=300, x=6.5))
    killed: list[int] = []

    def kill_the_worker() -> None:
        _wait_for(_evaluators, "the evaluator start")
        for pid in _ray_eval_workers():
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    killer = threading.Thread(target=kill_the_worker)
    killer.start()
    out = submit(run, "slow candidate")
    killer.join()
    assert killed, "no Ray worker was running the evaluation"
    assert out.outcome == "failed"
    assert "worker" in (out.evaluation.result.error or "") and "died" in (out.evaluation.result.error or "")
    # The orphaned evaluator child (no sandbox here to take it down) was reaped on the node.
    _wait_for(lambda: not _evaluators(), "the orphaned evaluator gone", limit=60)
    assert not list(Path(tempfile.gettempdir()).glob("avo-ray-*/eval"))  # and its private folder
    (run.paths.work / "solution.py").write_text(GOOD.format(x=6.5))
    assert submit(run, "fast again").outcome == "accepted"


def test_a_stopped_worker_is_cancelled_at_the_driver_deadline(ray_env: Cluster, toy: Path, tmp_path: Path) -> None:
    _set_timeout(toy, 6)
    run = start_run(str(toy), tmp_path / "runs", executor="ray", executor_options={"grace": "3"})
    (run.paths.work / "solution.py").write_text(SLEEPY.format(s=300, x=6.5))
    stopped: list[int] = []

    def freeze_the_worker() -> None:
        _wait_for(_evaluators, "the evaluator start")
        for pid in _ray_eval_workers():
            os.kill(pid, signal.SIGSTOP)  # alive but silent: its own timeout can never report
            stopped.append(pid)

    freezer = threading.Thread(target=freeze_the_worker)
    freezer.start()
    out = submit(run, "a candidate on a frozen worker")
    freezer.join()
    assert stopped
    assert out.outcome == "failed" and "did not answer within 6 s + 3 s" in (out.evaluation.result.error or "")
    _wait_for(lambda: not [p for p in stopped if Path(f"/proc/{p}").exists()
                           and "zombie" not in Path(f"/proc/{p}/status").read_text()],
              "the frozen worker gone", limit=60)
    (run.paths.work / "solution.py").write_text(GOOD.format(x=6.5))
    assert submit(run, "fast again").outcome == "accepted"


def test_a_node_whose_installed_evaluator_differs_is_refused_naming_the_file(
        ray_env: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ray_env.honest_probe))
    reset_plugin_manager()
    try:
        # The probe target holds accelerator "probe": only the worker node has it, and that
        # node has another build of the plugin installed.
        with pytest.raises(IntegrityError, match=r"refused on .*evaluator changed.*modified: __init__\.py"):
            start_run("probe", tmp_path / "runs", executor="ray")
        assert not list((tmp_path / "runs").glob("probe-*"))
        here = start_run("probe", tmp_path / "runs-local")  # the driver's own build is fine locally
        assert here.state.best_version.scalar == 1.0
    finally:
        reset_plugin_manager()


def test_confirm_runs_of_a_noisy_target_run_two_at_a_time(ray_env: Cluster, toy: Path, tmp_path: Path) -> None:
    spec = toy / "target.yaml"
    spec.write_text(spec.read_text().replace("score:\n  direction: maximize\n",
                                             "score:\n  direction: maximize\n  noise:\n    band: 0.5\n"
                                             "    confirm_runs: 2\n"))
    (toy / "seed" / "solution.py").write_text(SLEEPY.format(s=2, x=6.0))
    run = start_run(str(toy), tmp_path / "runs", executor="ray", executor_options={"jobs": "2"})
    (run.paths.work / "solution.py").write_text(SLEEPY.format(s=2, x=6.05))  # a gain inside the band
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:  # evaluations in flight: distinct candidate folders being evaluated
        while not stop.is_set():
            folders = {c.split("--workdir", 1)[1].split()[0] for c in _cmdlines().values()
                       if "eval.py --workdir" in c and "avo-ray-" in c}
            seen.append(len(folders))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        out = submit(run, "a small step")
    finally:
        stop.set()
        watcher.join()
    record = next(r for r in read_trajectory(run.paths) if r.get("kind") == "submit")
    assert len(record["confirm"]["best"]) == 2 and len(record["confirm"]["candidate"]) == 3, record
    assert out.outcome in ("accepted", "rejected")
    assert max(seen) == 2  # two evaluations in flight at once, never more than jobs=2


def test_a_target_needing_what_no_node_has_is_refused_at_start(ray_env: Cluster, toy: Path, tmp_path: Path) -> None:
    spec = toy / "target.yaml"
    spec.write_text(spec.read_text() + "\nresources:\n  cpus: 1\n  gpus: 1\n")
    with pytest.raises(AvoError, match=r"no alive node .*num_gpus=1"):
        start_run(str(toy), tmp_path / "runs", executor="ray")


def test_capacity_counts_what_each_node_holds() -> None:
    node = {"CPU": 8.0, "GPU": 2.0, "memory": 16 * 2**30, "accelerator_type:H100": 1.0}
    assert _fits(node, TargetResources()) == 8
    assert _fits(node, TargetResources(cpus=2, gpus=1)) == 2
    assert _fits(node, TargetResources(cpus=1, memory_mb=6144)) == 2
    assert _fits(node, TargetResources(gpus=1, accelerator="B200")) == 0
    assert _fits(node, TargetResources(gpus=1, accelerator="H100")) == 2
    assert _fits({"CPU": 4.0}, TargetResources(gpus=1)) == 0


def test_an_unknown_option_is_a_clear_error(ray_env: Cluster, toy: Path, tmp_path: Path) -> None:
    with pytest.raises(AvoError, match=r"unknown ray executor option\(s\) adress"):
        start_run(str(toy), tmp_path / "runs", executor="ray", executor_options={"adress": "x"})


def test_a_node_lost_mid_evaluation_is_a_failed_evaluation(ray_env: Cluster, toy: Path, tmp_path: Path) -> None:
    from conftest import _processes, _ray

    # A third node for this test alone, the only one with accelerator type "doomed".
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    _ray(["start", "--address", ray_env.address, "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
          "--resources", json.dumps({"accelerator_type:doomed": 1}), "--disable-usage-stats",
          "--object-store-memory", str(80 * 1024 * 1024)], env)
    spec = toy / "target.yaml"
    spec.write_text(spec.read_text() + "\nresources:\n  accelerator: doomed\n")
    run = _wait_for(lambda: _try_start(toy, tmp_path), "the new node in the cluster", limit=90)
    (run.paths.work / "solution.py").write_text(SLEEPY.format(s=300, x=6.5))

    def lose_the_node() -> None:
        _wait_for(_evaluators, "the evaluator start")
        procs = _processes()
        doomed = {pid for pid, (_, cmd) in procs.items() if "raylet" in cmd and "accelerator_type:doomed" in cmd}
        grown = True
        while grown:
            more = {pid for pid, (ppid, _) in procs.items() if ppid in doomed} - doomed
            doomed |= more
            grown = bool(more)
        for pid in doomed:
            os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=lose_the_node)
    killer.start()
    out = submit(run, "evaluated on a node that goes away")
    killer.join()
    assert out.outcome == "failed"
    error = out.evaluation.result.error or ""
    assert any(word in error for word in ("node", "worker")) and ("lost" in error or "died" in error), error


def _try_start(toy: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    try:
        return start_run(str(toy), tmp_path / "runs", executor="ray", sandbox="none")
    except AvoError as exc:
        if "no alive node" in str(exc):
            return None
        raise


def test_a_colony_evaluates_every_island_and_its_migrants_through_ray(ray_env: Cluster, toy: Path,
                                                                     tmp_path: Path) -> None:
    """Two islands stepped at once by `avo evolve --islands 2 --executor ray` (the classic
    backend, free): every evaluation of both islands, migrants included, ran as a Ray task."""
    import subprocess
    import sys

    runs = tmp_path / "runs"
    env = {**os.environ, "AVO_RUNS_DIR": str(runs)}
    env.pop("AVO_DISABLE_PLUGIN_AUTOLOAD", None)  # the child finds the classic backend and Ray as users do
    done = subprocess.run([sys.executable, "-m", "avo", "evolve", "--target", str(toy), "--backend", "classic",
                           "--seed", "1", "--islands", "2", "--max-steps", "4", "--migrate-every", "2",
                           "--executor", "ray", "--plain"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    colony = next(p for p in runs.iterdir() if "colony" in p.name)
    records = {}
    for island in ("island-1", "island-2"):
        paths = colony / island
        assert json.loads((paths / "run.json").read_text())["options"]["executor"] == "ray"
        records[island] = [json.loads(line) for line in (paths / "trajectory.jsonl").read_text().splitlines()]
        subs = [r for r in records[island] if r.get("kind") == "submit"]
        assert len(subs) == 4 and all(r["where"].startswith("ray ") for r in subs), subs
    migrants = [r for rs in records.values() for r in rs if r.get("kind") == "submit" and r.get("migrant")]
    assert migrants, "no migrant was evaluated in 4 steps at an interval of 2"
