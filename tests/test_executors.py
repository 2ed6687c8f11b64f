"""Executors as plugins: the local default, routing to the announcing plugin, what a job
carries, concurrency where the executor has room. (The Ray executor's own tests run a real
Ray cluster: plugins/avo-executor-ray/tests.)"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from avo import executors
from avo.cli.app import app
from avo.engine import evaluate_work, start_run, submit
from avo.errors import AvoError
from avo.hookspecs import hookimpl
from avo.models import EvalJob, ExecutorCheck, ExecutorInfo, JobResult
from avo.plugins import register, unregister
from avo.state import read_trajectory


class Recorder:
    """A test executor: runs each job in this process with run_job, keeps every job it got."""

    def __init__(self, name: str, capacity: int = 1) -> None:
        self.name, self.capacity = name, capacity
        self.jobs: list[EvalJob] = []
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()
        self.gate = threading.Barrier(capacity, timeout=30) if capacity > 1 else None

    @hookimpl
    def avo_executors(self) -> list[ExecutorInfo]:
        return [ExecutorInfo(name=self.name, remote=True)]

    @hookimpl
    def avo_execute(self, executor: str, job: EvalJob, options: dict[str, str]) -> JobResult | None:
        if executor != self.name:
            return None
        with self.lock:
            self.jobs.append(job)
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            if self.gate is not None and job.label.startswith("confirm"):
                self.gate.wait()  # returns only once `capacity` jobs are in flight together
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                log = Path(tmp) / "log"
                res = executors.run_job(job.model_copy(update={"workspace": None}), Path(tmp), log,
                                        executor=self.name, node="node-7", accelerator="TPU v9")
                return res.model_copy(update={"log": log.read_text() + f"options={options}\n"})
        finally:
            with self.lock:
                self.running -= 1

    @hookimpl
    def avo_executor_check(self, executor: str, target: object, options: dict[str, str]) -> ExecutorCheck | None:
        return ExecutorCheck(ok=True, capacity=self.capacity) if executor == self.name else None


class Impostor:
    """Answers avo_execute for every name: routing must never ask it about another's executor."""

    @hookimpl
    def avo_execute(self, executor: str, job: EvalJob, options: dict[str, str]) -> JobResult | None:
        raise AssertionError(f"asked to run a job of executor {executor!r}, which it never announced")


@pytest.fixture
def recorder(core_plugins: None) -> object:
    rec = Recorder("farm")
    register(rec, "farm-plugin")
    register(Impostor(), "impostor")
    yield rec
    unregister("farm-plugin")
    unregister("impostor")


def test_local_is_the_default_and_is_announced(toy: Path, runs_root: Path, core_plugins: None) -> None:
    assert "local" in [i.name for i in executors.all_executors()]
    run = start_run(str(toy), runs_root)
    assert run.state.options.executor == "local"
    assert json.loads(run.paths.run_json.read_text())["options"]["executor"] == "local"
    seed = next(r for r in read_trajectory(run.paths) if r.get("id") == "seed")
    assert seed["where"].startswith("local ")


def test_an_unknown_executor_is_a_clear_error_listing_the_installed_ones(toy: Path, runs_root: Path,
                                                                         core_plugins: None) -> None:
    with pytest.raises(AvoError, match=r"unknown executor 'ray'; installed executors: local.*avo-executor-ray"):
        start_run(str(toy), runs_root, executor="ray")
    result = CliRunner().invoke(app, ["start", "--target", str(toy), "--executor", "nowhere", "--no-prompt"])
    assert result.exit_code == 1 and "unknown executor 'nowhere'" in result.output


def test_a_run_on_another_executor_sends_it_everything_and_only_to_its_provider(
        toy: Path, runs_root: Path, recorder: Recorder) -> None:
    run = start_run(str(toy), runs_root, executor="farm", executor_options={"queue": "gpu"})
    assert run.state.options.executor == "farm" and run.state.options.executor_options == {"queue": "gpu"}
    seed_job = next(j for j in recorder.jobs if j.label == "seed")
    assert seed_job.archive is not None
    assert hashlib.sha256(seed_job.archive).hexdigest() == seed_job.archive_sha256
    assert seed_job.tree is not None and len(seed_job.tree) == 40
    assert seed_job.secret and run.state.versions[0].secret == seed_job.secret  # fresh, recorded after
    assert seed_job.evaluator_hashes == run.state.hashes["evaluator"]
    assert seed_job.runtime_hashes == run.state.hashes["runtime"]
    assert seed_job.sandbox == run.state.sandbox and seed_job.timeout == 60
    assert any(j.baselines and j.archive is None for j in recorder.jobs)
    assert {b.name for b in run.state.baselines} == {"zeros", "midpoint"}
    (run.paths.work / "solution.py").write_text("X = 6.5\nY = 3.0\n\ndef square(n):\n    return n * n\n")
    out = submit(run, "closer")
    assert out.outcome == "accepted" and out.evaluation.where == "farm node-7 (TPU v9)"
    assert "options={'queue': 'gpu'}" in out.evaluation.log_path.read_text()  # the log came back
    step_job = recorder.jobs[-1]
    assert step_job.configs == ["config_a", "config_b"] and not step_job.quick
    record = next(r for r in read_trajectory(run.paths) if r.get("kind") == "submit")
    assert record["where"] == "farm node-7 (TPU v9)"
    # One evaluation elsewhere: `avo eval --executor local`.
    here = evaluate_work(run, executor="local")
    assert here.evaluation.where is not None and here.evaluation.where.startswith("local ")
    assert here.evaluation.result == out.evaluation.result


def test_confirm_runs_go_two_at_a_time_when_the_executor_has_room(toy: Path, runs_root: Path,
                                                                 core_plugins: None) -> None:
    spec = toy / "target.yaml"
    spec.write_text(spec.read_text().replace(
        "score:\n  direction: maximize\n", "score:\n  direction: maximize\n  noise:\n    band: 0.5\n    confirm_runs: 2\n"))
    rec = Recorder("pair", capacity=2)
    register(rec, "pair-plugin")
    try:
        run = start_run(str(toy), runs_root, executor="pair")
        (run.paths.work / "solution.py").write_text("X = 1.05\nY = 1.0\n\ndef square(n):\n    return n * n\n")
        submit(run, "a step inside the noise band")
    finally:
        unregister("pair-plugin")
    confirms = [j.label for j in rec.jobs if j.label.startswith("confirm")]
    assert sorted(confirms) == ["confirm0-best", "confirm0-cand", "confirm1-best", "confirm1-cand"]
    assert rec.most == 2  # the barrier let them through only together
    record = next(r for r in read_trajectory(run.paths) if r.get("kind") == "submit")
    assert len(record["confirm"]["best"]) == 2 and len(record["confirm"]["candidate"]) == 3


def test_the_candidate_archive_is_content_addressed_and_checked(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("A = 1\n")
    (src / "b.txt").write_text("b\n")
    (src / "link").symlink_to("/etc/passwd")
    data, sha = executors.pack(src)
    again, sha2 = executors.pack(src)
    assert data == again and sha == sha2  # the same tree packs to the same address
    dest = tmp_path / "dest"
    executors.unpack(data, sha, dest)
    assert (dest / "pkg" / "a.py").read_text() == "A = 1\n" and not (dest / "link").exists()
    with pytest.raises(AvoError, match="does not match its sha256"):
        executors.unpack(data[:-1] + b"x", sha, tmp_path / "other")


def test_doctor_checks_each_executor(core_plugins: None) -> None:
    result = CliRunner().invoke(app, ["doctor"])
    assert "executor local: evaluations run here, one at a time" in result.output
