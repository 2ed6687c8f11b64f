"""The session-mode CLI as a user and an agent see it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from avo.cli.app import app
from tests.conftest import set_constants

runner = CliRunner()


def avo(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def newest_run(runs_root: Path) -> Path:
    return sorted(p for p in runs_root.iterdir() if not p.name.startswith("."))[-1]


def test_cli_session(toy: Path, runs_root: Path, core_plugins: None) -> None:
    code, out = avo("start", "--target", str(toy), "--max-steps", "5")
    assert code == 0
    assert "# avo — step 1 of 5 — target `toy`" in out and "| v0 ★ |" in out and "kb/hints.md" in out
    run = newest_run(runs_root)

    set_constants(run / "work", x=6)
    code, out = avo("eval")
    assert code == 0 and out.startswith("PASS  scalar") and "vs best v0" in out and "config_a" in out
    assert "log: logs/" in out

    # The run's own avo-eval is a real executable an agent can call from anywhere.
    proc = subprocess.run([str(run / "avo-eval")], capture_output=True, text=True, cwd="/")
    assert proc.returncode == 0 and proc.stdout.startswith("PASS"), proc.stderr

    code, out = avo("submit", "-m", "X to 6")
    assert code == 0 and "ACCEPTED as v1 (new best)" in out and "step 1 of 5 (4 left)" in out
    set_constants(run / "work", x=0)
    code, out = avo("submit", "-m", "X to 0")
    assert "REJECTED" in out and "Diff archived: rejected/step0002-rejected.diff" in out

    code, out = avo("status", "--json")
    data = json.loads(out)
    assert data["best"]["version"] == "v1" and data["steps"] == 2 and data["steps_left"] == 3
    assert data["work_dirty"] is False and data["baselines"]["midpoint"] > 0

    code, out = avo("log", "--attempts")
    assert "step   1 accepted v1" in out and "step   2 rejected" in out
    code, out = avo("runs")
    assert run.name in out and "v1 =" in out


def test_eval_exits_non_zero_on_fail(toy: Path, runs_root: Path, core_plugins: None) -> None:
    code, _ = avo("start", "--target", str(toy), "--no-prompt")
    assert code == 0
    run = newest_run(runs_root)
    (run / "work" / "solution.py").write_text("X = 1.0\nY = 1.0\n\ndef square(n):\n    return n + n\n")
    code, out = avo("eval")
    assert code == 1 and "FAIL" in out, out
    code, out = avo("eval", "--json")
    assert code == 1 and json.loads(out)["correct"] is False
    proc = subprocess.run([str(run / "avo-eval")], capture_output=True, text=True, cwd="/")
    assert proc.returncode == 1 and "FAIL" in proc.stdout, proc.stderr


def test_cli_supervisor_blocks_prompt(toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    avo("start", "--target", str(toy), "--stall-limit", "1", "--no-prompt")
    run = newest_run(runs_root)
    set_constants(run / "work", x=-3)
    code, out = avo("submit", "-m", "worse")
    assert "SUPERVISOR DUE: stalled: 1 steps without a new best" in out
    code, out = avo("prompt")
    assert code == 3 and "blocked: the supervisor is due" in out
    code, out = avo("supervisor", "brief")
    assert code == 0 and "Supervisor review" in out and "concrete, distinct" in out
    answer = tmp_path / "answer.md"
    answer.write_text("1. Tune Y, which never moved.\n2. Bisect X between 5 and 9.\n")
    code, out = avo("supervisor", "record", "-f", str(answer))
    assert code == 0 and "redirect recorded" in out
    code, out = avo("prompt")
    assert code == 0 and "Tune Y, which never moved" in out
    assert (run / "supervisor" / "brief-001.md").exists() and (run / "supervisor" / "redirect-001.md").exists()


def test_cli_errors_are_clean(runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    code, out = avo("status")
    assert code == 1 and "error: no runs under" in out and "Traceback" not in out
    code, out = avo("start", "--target", "no-such-target")
    assert code == 1 and "unknown target 'no-such-target'" in out
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "target.yaml").write_text("name: bad\n")
    code, out = avo("start", "--target", str(bad))
    assert code == 1 and "field 'entrypoint': required field is missing" in out
    # Brackets in a message are text: once read as rich markup, "[/x]" crashed the error printer
    # and "[0]" vanished.
    code, out = avo("start", "--target", "[0][/work/x]")
    assert code == 1 and "unknown target '[0][/work/x]'" in out, out
    # Nor are emoji codes: ":smile:" in a name or a path is printed as it is, not as an emoji.
    code, out = avo("start", "--target", "/tmp/x:smile:y")
    assert code == 1 and "unknown target '/tmp/x:smile:y'" in out, out


def test_cli_listings(core_plugins: None, toy: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("AVO_TARGET_PATH", str(toy))
    code, out = avo("targets")
    assert code == 0 and "toy" in out and "directory" in out
    code, out = avo("plugins", "--json")
    assert any(p["name"] == "directory" and p["distribution"] == "avo-core" for p in json.loads(out))
    code, out = avo("doctor")
    assert "git: git version" in out and "Python 3." in out and "target toy: ready" in out


def test_doctor_reports_a_target_that_needs_a_gpu(core_plugins: None, toy: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from avo.cli.info import visible_gpus
    from avo.plugins import find_target

    (toy / "target.yaml").write_text((toy / "target.yaml").read_text()
                                     + "resources:\n  gpus: 1\n  accelerator: cuda\n  memory_mb: 4096\n")
    monkeypatch.setenv("AVO_TARGET_PATH", str(toy))
    spec = find_target(str(toy))
    assert spec.resources.gpus == 1 and spec.resources.accelerator == "cuda" and spec.resources.memory_mb == 4096
    code, out = avo("doctor", "--target", "toy")
    assert "target toy: needs 1 GPU(s) (cuda)" in out
    if visible_gpus():
        assert "visible:" in out
    else:  # asked about this target alone, a missing GPU is a problem
        assert "none visible here" in out and code == 1
    (toy / "target.yaml").write_text((toy / "target.yaml").read_text() + "  tpus: 2\n")
    code, out = avo("start", "--target", str(toy))
    assert code == 1 and "field 'resources.tpus': unknown field" in out


def test_help_stays_light() -> None:
    code = (
        "import sys\nfrom avo.cli.app import app\n"
        "try:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('numpy', 'matplotlib', 'git', 'mcp', 'anthropic', 'openai', 'mlx', 'cffi') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "AVO_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert "HEAVY []" in proc.stdout, proc.stdout + proc.stderr


def test_quick_screening_inside_a_full_run(toy: Path, runs_root: Path, core_plugins: None) -> None:
    avo("start", "--target", str(toy), "--no-prompt")
    run = newest_run(runs_root)
    set_constants(run / "work", x=6)
    code, out = avo("eval", "--quick", "--json")
    data = json.loads(out)
    assert code == 0 and data["screening"] is True and data["gain_vs_best"] is None
    code, out = avo("eval", "--quick")
    assert "quick screening" in out and "not comparable" in out and "WARNING" not in out
    code, out = avo("eval")  # the same tree in full mode: no false non-determinism warning
    assert "vs best v0" in out and "WARNING" not in out
    records = [json.loads(line) for line in (run / "trajectory.jsonl").read_text().splitlines()]
    assert [r.get("screening") for r in records if r.get("kind") == "eval" and r.get("id") != "seed"] == [True, True, False]


def test_json_commands_say_why_there_is_no_result_as_json_on_stdout(tmp_path: Path, runs_root: Path,
                                                                     core_plugins: None) -> None:
    # A machine client reads stdout: before, an error left it empty (the message went to stderr only).
    for args, named in ((["status", "--json", "--run", "no-such-run"], "no-such-run"),
                        (["log", "--json", "--run", str(tmp_path / "missing")], "missing")):
        result = CliRunner().invoke(app, args, catch_exceptions=False)
        assert result.exit_code == 1, result.output
        reply = json.loads(result.stdout)
        assert reply["kind"] == "error" and reply["exit"] == 1 and named in reply["error"], reply
    plain = CliRunner().invoke(app, ["status", "--run", "no-such-run"], catch_exceptions=False)
    assert plain.exit_code == 1 and plain.stdout == ""  # without --json, stdout stays empty
