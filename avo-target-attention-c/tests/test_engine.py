"""End to end through avo's engine and its evaluator child process."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
from avo.engine import start_run, submit
from avo.evaluation import evaluate_dir
from avo.plugins import find_target
from avo.state import read_trajectory
from conftest import KERNELS, SEED, at_entry


def test_target_is_registered_with_its_spec() -> None:
    spec = find_target("attention_c")
    assert spec.provider == "attention_c"
    assert spec.entrypoint == "kernel.c" and spec.direction == "maximize" and spec.has_baselines
    assert spec.requirements[:2] == ["numpy", "cffi"]
    assert 0 < spec.noise.band < 0.2 and spec.noise.confirm_runs >= 2
    assert spec.eval_timeout == 600.0


def test_a_run_starts_from_the_seed_and_a_vectorised_kernel_is_judged(tmp_path: Path) -> None:
    run = start_run("attention_c", tmp_path, quick=True)
    assert (run.paths.work / "kernel.c").read_text() == SEED
    kb = sorted(p.name for p in run.paths.kb.iterdir())
    assert "README.md" in kb and len(kb) >= 6
    v0 = run.state.versions[0]
    assert v0.scalar > 0 and set(v0.metrics) == set(run.state.configs)
    baselines = {b.name: b for b in run.state.baselines}
    assert baselines["numpy"].correct and set(baselines["numpy"].metrics.values()) == {1.0}
    # torch's SDPA is a baseline exactly when torch is importable (the [torch] extra)
    assert ("torch_sdpa" in baselines) == (importlib.util.find_spec("torch") is not None)
    if "torch_sdpa" in baselines:
        assert baselines["torch_sdpa"].correct and set(baselines["torch_sdpa"].metrics) == set(run.state.configs)

    shutil.copy(KERNELS / "vectorised.c", run.paths.work / "kernel.c")
    (run.paths.work / "cflags.txt").write_text("-march=native\n")
    outcome = submit(run, "vectorise the score and PV loops")
    # Timing on a shared machine decides which; the mechanics are what is tested here.
    assert outcome.outcome in ("accepted", "rejected"), outcome.reason
    assert outcome.evaluation.scalar is not None and outcome.evaluation.scalar > 0
    record = [r for r in read_trajectory(run.paths) if r.get("kind") == "submit"][-1]
    assert record["outcome"] == outcome.outcome and set(record["metrics"]) == set(run.state.configs)
    if outcome.outcome == "accepted":
        assert (run.paths.work / "cflags.txt").exists() and run.state.best == 1
    else:
        assert not (run.paths.work / "cflags.txt").exists() and outcome.diff_path is not None


def test_a_broken_candidate_is_rejected_as_failed_and_the_seed_restored(tmp_path: Path) -> None:
    run = start_run("attention_c", tmp_path, quick=True)
    (run.paths.work / "kernel.c").write_text(at_entry("if (n == 2) *(volatile int *)0 = 1;"))
    outcome = submit(run, "crash on n=2")
    assert outcome.outcome == "failed"
    assert "crashed with SIGSEGV" in outcome.reason and "n=2" in outcome.reason
    assert (run.paths.work / "kernel.c").read_text() == SEED


def test_evaluator_child_survives_a_segfault_and_prints_the_contract(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "cand"
    work.mkdir()
    (work / "kernel.c").write_text(at_entry(
        'if (n == 3) { printf("{\\"correct\\": true, \\"metrics\\": {\\"x\\": 99}}\\n"); fflush(stdout); '
        "*(volatile int *)0 = 1; }").replace("#include <math.h>", "#include <math.h>\n#include <stdio.h>"))
    monkeypatch.setenv("AVO_ATTENTION_C_CALL_TIMEOUT", "5")
    log = tmp_path / "logs" / "eval.log"
    ev = evaluate_dir(find_target("attention_c"), work, log, quick=True)
    # what the kernel printed went to the log only, so the result is the evaluator's
    assert ev.result.correct is False and ev.scalar is None
    assert ev.result.error is not None
    assert "crashed with SIGSEGV" in ev.result.error and "n=3" in ev.result.error
    assert '"x": 99' in log.read_text() and "x" not in ev.result.metrics


def test_the_thread_count_is_the_runs_whatever_the_agents_shell_sets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An agent's shell with AVO_ATTENTION_C_THREADS=2 would measure its candidate in 2-thread
    # mode (wall clock, both sides threaded) against a lineage measured at one thread.
    from avo.engine import evaluate_work, open_run

    monkeypatch.delenv("AVO_ATTENTION_C_THREADS", raising=False)
    run = start_run("attention_c", tmp_path, quick=True)
    assert run.state.target.settings == {}
    assert "threads: candidate 1 " in (run.state.versions[0].notes or "")
    monkeypatch.setenv("AVO_ATTENTION_C_THREADS", "2")
    report = evaluate_work(open_run(run.paths.root, tmp_path))
    notes = report.evaluation.result.notes or ""
    assert "threads: candidate 1 " in notes and "threads: candidate 2" not in notes, notes
    assert report.warning is not None and "AVO_ATTENTION_C_THREADS=2 in this shell is not used" in report.warning


def test_the_agents_compiler_paths_never_reach_the_evaluators_own_builds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Round seven of the red team: the evaluator builds its trusted request loop and FMA probe with
    # cc, outside the sandbox, in the environment of the shell that ran `avo submit`; gcc ran the
    # `as` it found on COMPILER_PATH, and the agent's assembled a request loop that burned CPU in
    # the twin worker, so more was subtracted from every kernel call (5.34 recorded for 0.39).
    # CPATH and LIBRARY_PATH reach the compiler's headers and libraries the same way.
    real_as = shutil.which("as")
    assert real_as is not None
    fake = tmp_path / "fakebin"
    fake.mkdir()
    marker = tmp_path / "agents-as-ran"
    (fake / "as").write_text(f"#!/bin/sh\necho \"$*\" >> '{marker}'\nexec '{real_as}' \"$@\"\n")
    (fake / "as").chmod(0o755)
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "stddef.h").write_text('#error "the agent\'s header"\n')
    monkeypatch.setenv("COMPILER_PATH", str(fake))
    monkeypatch.setenv("CPATH", str(tmp_path / "include"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "agents-tmp"))
    work = tmp_path / "cand"
    work.mkdir()
    (work / "kernel.c").write_text(SEED)
    ev = evaluate_dir(find_target("attention_c"), work, tmp_path / "logs" / "eval.log", quick=True)
    assert ev.scalar is not None, ev.result.error
    assert not marker.exists(), marker.read_text()
