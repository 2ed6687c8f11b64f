"""claude_cli against a fake ``claude`` executable (a Python script on PATH) that emits real
stream-json: a working step, an error result, and a hang past the step timeout."""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import avo_backend_claude_cli as backend
import pytest

from avo.engine import start_run
from avo.evolve import EvolveConfig, evolve
from avo.plugins import all_backends, register, reset_plugin_manager, unregister
from avo.state import read_trajectory

TOY = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "toy"

FAKE = textwrap.dedent('''
    import json, os, pathlib, re, sys, time
    argv = sys.argv[1:]
    pathlib.Path(os.environ["FAKE_ARGV"]).write_text(json.dumps({"argv": argv, "cwd": os.getcwd()}))
    mode = os.environ.get("FAKE_MODE", "ok")
    def emit(obj):
        print(json.dumps(obj), flush=True)
    emit({"type": "system", "subtype": "init", "session_id": "sess-1", "model": "claude-sonnet-4-5",
          "cwd": os.getcwd(), "tools": ["Bash", "Read", "Edit"]})
    if mode == "hang":
        os.system("sleep 60 &")
        time.sleep(60)
    emit({"type": "assistant", "message": {"role": "assistant", "content": [
        {"type": "text", "text": "Reading the lineage."},
        {"type": "tool_use", "id": "t1", "name": "Edit", "input": {"file_path": "solution.py"}}]}})
    emit({"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}})
    if mode == "ok":
        sol = pathlib.Path("solution.py")
        sol.write_text(re.sub(r"^X = .*$", "X = 6.5", sol.read_text(), flags=re.M))
        emit({"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "text", "text": "Moved X to 6.5 towards the peak of config_a."}]}})
        emit({"type": "result", "subtype": "success", "is_error": False, "duration_ms": 1234, "num_turns": 3,
              "result": "I looked at the lineage.\\nMoved X to 6.5 towards the peak of config_a.",
              "session_id": "sess-1", "total_cost_usd": 0.0421,
              "usage": {"input_tokens": 1200, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 500,
                        "output_tokens": 250}})
    else:
        emit({"type": "result", "subtype": "error_during_execution", "is_error": True, "num_turns": 1,
              "result": "API Error: overloaded", "session_id": "sess-1", "total_cost_usd": 0.003,
              "usage": {"input_tokens": 100, "output_tokens": 5}})
''')


@pytest.fixture
def fake_claude(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "claude"
    exe.write_text(f"#!{sys.executable}\n{FAKE}")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv(backend.BIN_ENV, raising=False)
    monkeypatch.setenv("FAKE_ARGV", str(tmp_path / "argv.json"))
    return tmp_path / "argv.json"


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("AVO_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_plugin_manager()
    register(backend, "claude_cli")
    toy = tmp_path / "toy"
    shutil.copytree(TOY, toy, ignore=shutil.ignore_patterns("__pycache__"))
    try:
        yield toy
    finally:
        unregister("claude_cli")
        reset_plugin_manager()


def test_not_available_without_claude(plugin: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    info = next(b for b in all_backends() if b.name == "claude_cli")
    assert not info.available and "claude not found" in (info.reason or "") and info.costs_money


def test_step_edits_work_and_reports_usage(plugin: Path, fake_claude: Path, tmp_path: Path) -> None:
    info = next(b for b in all_backends() if b.name == "claude_cli")
    assert info.available
    run = start_run(str(plugin), tmp_path / "runs")
    summary = evolve(run, EvolveConfig(backend="claude_cli", max_steps=1, model="claude-sonnet-4-5",
                                       options={"max_turns": "20"}))
    assert summary.steps_taken == 1 and summary.best_version == 1
    call = json.loads(fake_claude.read_text())
    argv = call["argv"]
    assert Path(call["cwd"]).resolve() == run.paths.work.resolve()
    assert argv[0] == "-p" and "# avo — step 1" in argv[1]
    flags = dict(zip(argv[2:-1], argv[3:], strict=True))
    assert flags["--output-format"] == "stream-json" and "--verbose" in argv
    assert flags["--permission-mode"] == "acceptEdits" and "Bash" in flags["--allowedTools"]
    assert Path(flags["--add-dir"]).resolve() == run.paths.root.resolve()
    assert flags["--model"] == "claude-sonnet-4-5" and flags["--max-turns"] == "20"
    submit = next(r for r in read_trajectory(run.paths) if r["kind"] == "submit")
    assert submit["outcome"] == "accepted" and submit["message"] == "Moved X to 6.5 towards the peak of config_a."
    usage = submit["usage"]
    assert usage["input_tokens"] == 2000 and usage["output_tokens"] == 250 and usage["cost_usd"] == 0.0421
    assert usage["num_turns"] == 3 and usage["session_id"] == "sess-1" and usage["tool_calls"] == 1
    assert "X = 6.5" in (run.paths.work / "solution.py").read_text()


def test_error_result_is_an_error_step(plugin: Path, fake_claude: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MODE", "error")
    run = start_run(str(plugin), tmp_path / "runs")
    summary = evolve(run, EvolveConfig(backend="claude_cli", max_steps=1))
    assert summary.steps_taken == 1 and summary.spend == pytest.approx(0.003)
    step = next(r for r in read_trajectory(run.paths) if r["kind"] == "agent_step")
    assert step["outcome"] == "error" and "API Error: overloaded" in step["error"]


def test_hang_past_timeout_is_killed_and_recorded(plugin: Path, fake_claude: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MODE", "hang")
    run = start_run(str(plugin), tmp_path / "runs")
    summary = evolve(run, EvolveConfig(backend="claude_cli", max_steps=1, step_timeout=1.5))
    assert summary.steps_taken == 1
    step = next(r for r in read_trajectory(run.paths) if r["kind"] == "agent_step")
    assert step["outcome"] == "timeout" and "process group was killed" in step["error"]
    assert step["usage"]["wall_s"] < 30
    log = (run.paths.logs / "agent-0001.log").read_text()
    assert '"subtype": "init"' in log and "timed out, group killed" in log


def test_stream_parsing_ignores_noise() -> None:
    s = backend.StreamSummary()
    for line in ["not json", "", json.dumps([1]), json.dumps({"type": "result", "result": "done",
                                                             "usage": {"input_tokens": 3, "output_tokens": 4},
                                                             "total_cost_usd": 0.5})]:
        s.feed(line)
    assert s.bad_lines == 1 and s.usage() == (3, 4, 0.5)
