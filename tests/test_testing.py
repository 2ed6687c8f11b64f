"""avo.testing: the conformance suite passes on the toy target and catches broken targets."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from avo.testing import BackendConformance, TargetConformance, _unclean

TOY = Path(__file__).parent / "fixtures" / "toy"


class TestToyConformance(TargetConformance):
    """The whole suite, collected from the base class, against the toy directory target."""

    target = str(TOY)
    hostile = "import os\nos.system({shell_py})\n{original}"


def _run_suite(tmp_path: Path, target: Path, only: list[str], hostile: str | None = None,
               env: dict[str, str] | None = None) -> dict[str, str]:
    """Run the suite against ``target`` in a separate pytest; ``{test name: outcome}``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    test_file = tmp_path / "test_suite_on_target.py"
    test_file.write_text(textwrap.dedent(f"""
        from avo.testing import TargetConformance

        class TestIt(TargetConformance):
            target = {str(target)!r}
            hostile = {hostile!r}
    """))
    report = tmp_path / "junit.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(test_file), "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
         "-k", " or ".join(only)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env,
    )
    assert report.exists(), proc.stdout + proc.stderr
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        outcomes[case.get("name", "")] = ("failed" if kinds & {"failure", "error"}
                                          else "skipped" if "skipped" in kinds else "passed")
    return outcomes


def _copy_toy(tmp_path: Path) -> Path:
    dest = tmp_path / "target"
    shutil.copytree(TOY, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_suite_detects_a_seed_that_fails_the_gate(tmp_path: Path) -> None:
    target = _copy_toy(tmp_path)
    seed = target / "seed" / "solution.py"
    seed.write_text(seed.read_text().replace("return n * n", "return n + n"))
    outcomes = _run_suite(tmp_path, target, ["seed_passes", "failing_submit", "metadata", "empty_workdir"])
    assert outcomes["test_seed_passes_the_gate"] == "failed"
    assert outcomes["test_start_and_failing_submit_through_the_engine"] == "failed"
    # The checks that do not depend on the seed's score still pass.
    assert outcomes["test_metadata_is_complete"] == "passed"
    assert outcomes["test_empty_workdir_fails_cleanly"] == "passed"


def test_suite_detects_noise_unclean_failures_and_missing_metadata(tmp_path: Path) -> None:
    target = _copy_toy(tmp_path)
    evaluator = target / "eval.py"
    code = evaluator.read_text()
    # Noise the target does not declare: the score wanders between evaluations.
    code = code.replace('return {"correct": True, "metrics": score(x, y)',
                        'import random\n    return {"correct": True, "metrics": '
                        '{k: v * random.uniform(0.5, 1.5) for k, v in score(x, y).items()}')
    # A missing file crashes the evaluator instead of returning a closed gate.
    code = code.replace('return {"correct": False, "metrics": {}, "error": "solution.py is missing"}',
                        'raise SystemExit("boom")')
    evaluator.write_text(code)
    spec = target / "target.yaml"
    spec.write_text(spec.read_text().replace("description: Tune", "description: ''\n# Tune"))
    outcomes = _run_suite(tmp_path, target, ["reproducible", "empty_workdir", "metadata", "seed_passes", "garbage"])
    assert len(outcomes) == 5
    assert outcomes["test_evaluation_is_reproducible"] == "failed"
    assert outcomes["test_empty_workdir_fails_cleanly"] == "failed"
    assert outcomes["test_metadata_is_complete"] == "failed"
    assert outcomes["test_seed_passes_the_gate"] == "passed"
    assert outcomes["test_garbage_entrypoint_fails_cleanly"] == "passed"


def test_unclean_failures_are_named() -> None:
    assert _unclean("evaluator printed nothing on stdout; expected a JSON object") == "no JSON result"
    assert _unclean("evaluator timed out after 60 s (the target's timeout)") == "a timeout"
    assert _unclean("evaluator exited with status 1\n--- last lines of its stderr ---\nboom") == "a crash"
    assert _unclean("the evaluator raised KeyError: 'x'") == "an exception escaping avo_evaluate"
    assert _unclean("the evaluator raised KeyError: 'x'", allow_raise=True) is None
    assert _unclean("solution.py raised SyntaxError: '(' was never closed") is None


class TestMockBackendConformance(BackendConformance):
    """The backend suite against the built-in mock backend, with a real scripted step."""

    backend = "mock"
    step_options = {
        "command": "echo hello >> NOTES.txt && echo 'said hello'",
        "supervisor_command": "echo 'Try tiling. Try a different data layout.'",
    }


def test_backend_suite_runs_a_real_step(tmp_path: Path) -> None:
    suite = TestMockBackendConformance()
    from avo.plugins import find_backend

    info = find_backend("mock")
    suite.test_step_returns_a_step_result(info, tmp_path)
    assert (tmp_path / "work" / "NOTES.txt").read_text() == "hello\n"


def test_backend_suite_catches_a_colliding_and_misspelled_backend(core_plugins: None) -> None:
    from avo import hookimpl, plugins
    from avo.models import BackendInfo, StepRequest, StepResult

    class Clash:
        @hookimpl
        def avo_backends(self) -> list[BackendInfo]:
            return [BackendInfo(name="clash", description="fine"), BackendInfo(name="mock", description="a 2nd mock")]

        @hookimpl
        def avo_agent_stepp(self, backend: str, request: StepRequest) -> StepResult:
            return StepResult(message="never called")

        def avo_supervise(self, backend: str, brief: object) -> None:  # no @hookimpl
            return None

    class Suite(BackendConformance):
        backend = "clash"

    plugins.register(Clash(), name="clash", distribution="avo-backend-clash")
    try:
        info = plugins.find_backend("clash")
        Suite().test_announced_with_complete_info(info)
        with pytest.raises(AssertionError, match="backend 'mock' is announced 2 times"):
            Suite().test_names_do_not_collide(info)
        with pytest.raises(AssertionError, match=r"unknown hook avo_agent_stepp \(did you mean avo_agent_step\?\)"):
            Suite().test_hooks_are_all_known(info)
        with pytest.raises(AssertionError, match="function avo_supervise is not marked @avo.hookimpl"):
            Suite().test_hooks_are_all_known(info)
    finally:
        plugins.unregister("clash")


@pytest.mark.skipif(not __import__("avo.sandbox").sandbox.probe()[0], reason="needs a working bubblewrap")
def test_hostile_checks_catch_a_daemon_when_candidates_run_unsandboxed(tmp_path: Path) -> None:
    import os

    target = _copy_toy(tmp_path)
    only = ["hostile_a_daemon"]
    hostile = "import os\nos.system({shell_py})\n{original}"
    sandboxed = _run_suite(tmp_path / "a", target, only, hostile)
    bare = _run_suite(tmp_path / "b", target, only, hostile, env={**os.environ, "AVO_SANDBOX": "none"})
    assert sandboxed == {"test_hostile_a_daemon_does_not_outlive_the_evaluation": "passed"}
    assert bare == {"test_hostile_a_daemon_does_not_outlive_the_evaluation": "failed"}
    subprocess.run(["pkill", "-f", r"^sleep 120\.[0-9]+$"], capture_output=True)  # the unsandboxed one's daemon
