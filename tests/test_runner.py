"""The evaluator runner and the contract: every malformed result is a named failure."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from avo.contract import check_configs, parse_output, scalar_of
from avo.models import EvalResult, ResourceLimits
from avo.runner import run_child


def child(tmp_path: Path, code: str, timeout: float = 20.0, limits: ResourceLimits | None = None):
    script = tmp_path / "evaluator.py"
    script.write_text(code)
    return run_child([sys.executable, str(script)], cwd=tmp_path, timeout=timeout,
                     limits=limits or ResourceLimits(), log_path=tmp_path / "logs" / "eval.log")


@pytest.mark.parametrize(
    ("stdout", "problem"),
    [
        ("", "printed nothing on stdout"),
        ("progress 1\nprogress 2\n", "not valid JSON"),
        ('{"correct": true, "metrics": {"a": 1.0}', "not valid JSON"),
        ('[1, 2, 3]', "not an object"),
        ('{"metrics": {"a": 1.0}}', "no 'correct' key"),
        ('{"correct": "yes", "metrics": {"a": 1.0}}', "'correct' must be true or false"),
        ('{"correct": true}', "no 'metrics' key"),
        ('{"correct": true, "metrics": {"a": NaN}}', "not finite"),
        ('{"correct": true, "metrics": {"a": Infinity}}', "not finite"),
        ('{"correct": true, "metrics": {"a": "fast"}}', "is not a number"),
        ('{"correct": true, "metrics": {"a": 1.0}, "bonus": 3}', "Extra inputs are not permitted"),
        ('{"correct": true, "metrics": {}}', "needs metrics or a primary"),
    ],
)
def test_malformed_contract_is_a_named_failure(stdout: str, problem: str) -> None:
    result = parse_output(stdout)
    assert not result.correct
    assert problem in (result.error or "")


def test_only_the_last_line_is_the_contract() -> None:
    result = parse_output('{"correct": false}\nnoise\n{"correct": true, "metrics": {"a": 4, "b": 9}}\n')
    assert result.correct and scalar_of(result) == (pytest.approx(6.0), None)


def test_geomean_needs_positive_metrics_and_primary_wins() -> None:
    assert scalar_of(EvalResult(correct=True, metrics={"a": 2.0, "b": -1.0}))[0] is None
    assert "positive" in (scalar_of(EvalResult(correct=True, metrics={"a": 0.0}))[1] or "")
    assert scalar_of(EvalResult(correct=True, metrics={"a": -3.0}, primary=12.5)) == (12.5, None)
    failed = EvalResult(correct=False, metrics={"a": 100.0}, error="wrong answer")
    assert scalar_of(failed) == (None, "wrong answer")  # the gate, not a dimension


def test_config_set_must_match_the_seed() -> None:
    result = check_configs(EvalResult(correct=True, metrics={"a": 1.0, "c": 2.0}), {"a", "b"})
    assert not result.correct and "missing ['b']" in (result.error or "") and "unexpected ['c']" in (result.error or "")


def test_non_final_output_goes_to_the_log(tmp_path: Path) -> None:
    out = child(tmp_path, "import sys\nprint('chatter')\nprint('oops', file=sys.stderr)\n"
                          "print('{\"correct\": true, \"metrics\": {\"a\": 2}}')\n")
    assert out.result.correct and out.result.metrics == {"a": 2.0}
    log = out.log_path.read_text()
    assert "chatter" in log and "oops" in log


def test_hanging_evaluator_is_killed_with_its_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(600)\n"
    )
    started = time.monotonic()
    out = child(tmp_path, code, timeout=1.5)
    assert time.monotonic() - started < 30
    assert "timed out after 1.5 s" in (out.result.error or "") and "process group was killed" in (out.result.error or "")
    grandchild = int(pidfile.read_text())
    for _ in range(50):
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the evaluator's grandchild survived the timeout")


def test_crash_names_the_signal(tmp_path: Path) -> None:
    out = child(tmp_path, "import os, signal, sys\nprint('starting', file=sys.stderr)\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    assert "killed by SIGSEGV" in (out.result.error or "")
    assert "starting" in (out.result.error or "")  # the stderr tail comes along


def test_nonzero_exit_after_a_passing_line_is_a_crash(tmp_path: Path) -> None:
    out = child(tmp_path, "print('{\"correct\": true, \"metrics\": {\"a\": 2}}')\nraise SystemExit(3)\n")
    assert not out.result.correct and "exited with status 3" in (out.result.error or "")


def test_evaluator_may_exit_nonzero_with_a_closed_gate(tmp_path: Path) -> None:
    out = child(tmp_path, "print('{\"correct\": false, \"error\": \"kernel mismatch at n=3\"}')\nraise SystemExit(1)\n")
    assert out.result.error == "kernel mismatch at n=3"


def test_output_flood_is_capped(tmp_path: Path) -> None:
    out = child(tmp_path, "import sys\nchunk = 'x' * 65536 + '\\n'\nwhile True:\n    sys.stdout.write(chunk)\n", timeout=60)
    assert "output cap" in (out.result.error or "")
    assert out.log_path.stat().st_size < 12 * 1024 * 1024


def test_cpu_limit_is_named(tmp_path: Path) -> None:
    out = child(tmp_path, "while True:\n    pass\n", timeout=60, limits=ResourceLimits(cpu_seconds=1))
    assert "CPU-time limit (1 s" in (out.result.error or "")


def test_memory_limit_is_named(tmp_path: Path) -> None:
    out = child(tmp_path, "x = bytearray(2 << 30)\n", limits=ResourceLimits(address_space_mb=512))
    assert "address-space limit (512 MiB" in (out.result.error or "")


def test_open_files_limit_is_named(tmp_path: Path) -> None:
    code = "import os\nfs = [open(os.devnull) for _ in range(200)]\n"
    out = child(tmp_path, code, limits=ResourceLimits(open_files=64))
    assert "open-files limit (64" in (out.result.error or "")


def test_missing_evaluator_program(tmp_path: Path) -> None:
    out = run_child(["/nonexistent/evaluator"], cwd=tmp_path, timeout=5, limits=ResourceLimits(),
                    log_path=tmp_path / "e.log")
    assert "could not start the evaluator" in (out.result.error or "")

