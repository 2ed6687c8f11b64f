"""``avo evolve`` end to end: a scripted agent through the mock backend, real child processes
and real git; the supervisor, budgets, Ctrl-C and --resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from avo.engine import open_run, start_run
from avo.errors import AvoError
from avo.evolve import EvolveConfig, Progress, evolve, spend_of, steps_taken
from avo.state import read_trajectory

AGENT = textwrap.dedent('''
    """A scripted agent: what it does depends on how often it has been called."""
    import json, os, pathlib, re, subprocess, sys, time

    counter = pathlib.Path(os.environ["AGENT_STATE"])
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    work = pathlib.Path(os.environ["AVO_WORK_DIR"])
    assert pathlib.Path.cwd().resolve() == work.resolve()
    sol = work / "solution.py"
    prompt = pathlib.Path(os.environ["AVO_PROMPT_FILE"]).read_text()

    def setc(name, value):
        sol.write_text(re.sub(rf"^{name} = .*$", f"{name} = {value}", sol.read_text(), flags=re.M))

    if n == 1:
        setc("X", 4.0)
        subprocess.run([os.environ["AVO_EVAL"]], check=True, capture_output=True)
        msg = "move X to 4"
    elif n == 2:
        setc("X", 2.0); msg = "X to 2 (worse)"
    elif n == 3:
        sol.write_text(sol.read_text().replace("return n * n", "return n + n")); msg = "break square"
    elif n == 4:
        msg = "looked around, changed nothing"
    elif n == 5:
        setc("X", 3.0); msg = "X to 3 (still worse)"
    elif n == 6:
        pathlib.Path(os.environ["AGENT_STATE"] + ".redirect").write_text(str("PUSH-X-HIGHER" in prompt))
        setc("X", 7.0); msg = "follow the redirect: X to 7"
    elif n == 7 and os.environ.get("AGENT_HANG"):
        setc("Y", 9.0)
        pathlib.Path(os.environ["AGENT_STATE"] + ".hanging").write_text("yes")
        time.sleep(120)
        msg = "never reached"
    else:
        setc("Y", 3.0); msg = "Y to 3"
    print("thinking out loud")
    print(json.dumps({"message": msg, "input_tokens": 1000, "output_tokens": 50 * n, "cost_usd": 0.01}))
''')

SUPERVISOR = textwrap.dedent('''
    import os, pathlib
    brief = pathlib.Path(os.environ["AVO_BRIEF_FILE"]).read_text()
    assert "Supervisor review" in brief, brief[:200]
    print("PUSH-X-HIGHER: the per-config numbers say config_a is far from its peak; push X past 4.")
    print("Second direction: leave Y alone for now.")
''')


def _scripts(tmp_path: Path) -> dict[str, str]:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    sup = tmp_path / "supervisor.py"
    sup.write_text(SUPERVISOR)
    return {"command": f"{sys.executable} {agent}", "supervisor_command": f"{sys.executable} {sup}",
            "state": str(tmp_path / "agent.count")}


def _avo(args: list[str], env: dict[str, str], **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "avo", "evolve", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def _env(scripts: dict[str, str], runs_root: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "AVO_DISABLE_PLUGIN_AUTOLOAD": "1", "AVO_RUNS_DIR": str(runs_root),
           "AGENT_STATE": scripts["state"], "AVO_MOCK_COMMAND": scripts["command"],
           "AVO_MOCK_SUPERVISOR_COMMAND": scripts["supervisor_command"], **extra}
    env.pop("AGENT_HANG", None)
    env.update(extra)
    return env


def _git(work: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=work, capture_output=True, text=True, check=True).stdout


def test_mock_run_supervisor_interrupt_and_resume(tmp_path: Path, toy: Path, runs_root: Path) -> None:
    scripts = _scripts(tmp_path)
    env = _env(scripts, runs_root)

    # Six scripted steps: improve, regress, break the gate, stall, regress (supervisor due), improve.
    proc = _avo(["--target", str(toy), "--backend", "mock", "--max-steps", "6", "--json-log"], env)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    events = [json.loads(line) for line in stdout.splitlines()]
    assert events[0]["event"] == "start" and events[-1]["event"] == "stop"
    ends = [e for e in events if e["event"] == "step_end"]
    assert [e["outcome"] for e in ends] == ["accepted", "rejected", "failed", "no_change", "rejected", "accepted"]
    assert [e["attempt"] for e in ends] == [1, 2, 3, 4, 5, 6]
    assert ends[0]["new_best"] and ends[5]["new_best"] and ends[5]["version"] == 2
    assert ends[-1]["spend_usd"] == pytest.approx(0.06)
    assert [e["event"] for e in events].count("supervisor_end") == 1
    assert "step budget reached (6/6" in events[-1]["reason"]
    assert Path(scripts["state"] + ".redirect").read_text() == "True"  # step 6's prompt carried the redirect

    run = open_run(None, runs_root)
    records = read_trajectory(run.paths)
    kinds = [r["kind"] for r in records]
    assert kinds.count("submit") == 5 and kinds.count("agent_step") == 1
    assert any(r["kind"] == "eval" and r["id"] != "seed" for r in records)  # the agent's own avo-eval call
    no_change = next(r for r in records if r["kind"] == "agent_step")
    assert no_change["outcome"] == "no_change" and no_change["usage"]["cost_usd"] == 0.01
    first = next(r for r in records if r["kind"] == "submit")
    assert first["usage"]["input_tokens"] == 1000 and first["usage"]["backend"] == "mock"
    assert first["usage"]["wall_s"] > 0
    assert kinds.index("supervisor_brief") < kinds.index("supervisor_record") < kinds.index("supervisor_answer")
    assert steps_taken(records) == 6 and spend_of(records)[0] == pytest.approx(0.06)
    assert [v.n for v in run.state.versions] == [0, 1, 2]
    assert run.state.supervisor.briefs == 1 and run.state.supervisor.pending_redirect is None
    assert run.state.steps == 5  # the unchanged step is not a submit
    assert (run.paths.logs / "agent-0001.log").read_text().count("thinking out loud") == 1

    # Resume with an agent that hangs mid-step; Ctrl-C (SIGINT) stops it cleanly.
    env_hang = _env(scripts, runs_root, AGENT_HANG="1")
    proc = _avo(["--resume", str(run.paths.root), "--max-steps", "8"], env_hang)
    hanging = Path(scripts["state"] + ".hanging")
    deadline = time.monotonic() + 60
    while not hanging.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert hanging.exists(), "the agent never started"
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "--resume" in stderr
    assert "step 7/8: agent working" in stdout  # plain lines: stdout is not a terminal

    run = open_run(run.paths.root, runs_root)
    records = read_trajectory(run.paths)
    interrupted = [r for r in records if r["kind"] == "interrupted"]
    assert len(interrupted) == 1 and interrupted[0]["attempt"] == 7 and interrupted[0]["phase"] == "agent"
    assert [v.n for v in run.state.versions] == [0, 1, 2]  # nothing accepted is lost
    assert _git(run.paths.work, "tag").split() == ["v0", "v1", "v2"]
    assert "X = 7.0" in (run.paths.work / "solution.py").read_text()
    assert "Y = 1.0" in (run.paths.work / "solution.py").read_text()  # the half-done edit was reverted...
    reverted = list(run.paths.rejected.glob("reverted-*.diff"))
    assert len(reverted) == 1 and "+Y = 9.0" in reverted[0].read_text()  # ...and archived
    assert steps_taken(records) == 6

    # --resume continues with the recorded backend and options, up to the new budget.
    proc = _avo(["--resume", run.paths.root.name], env)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    run = open_run(run.paths.root, runs_root)
    records = read_trajectory(run.paths)
    assert steps_taken(records) == 8
    assert [v.n for v in run.state.versions] == [0, 1, 2, 3]
    assert run.state.best_version.message == "Y to 3"
    assert run.state.best_version.scalar == pytest.approx(101.0)
    assert "stopped: step budget reached (8/8" in stdout


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def handle(self, event: str, progress: Progress, data: dict[str, Any]) -> None:
        self.events.append((event, dict(data)))


def test_max_cost_stops_before_a_step_past_the_spend(tmp_path: Path, toy: Path, runs_root: Path,
                                                     core_plugins: None) -> None:
    scripts = _scripts(tmp_path)
    os.environ["AGENT_STATE"] = scripts["state"]
    try:
        run = start_run(str(toy), runs_root)
        rec = Recorder()
        config = EvolveConfig(backend="mock", max_cost=0.025, options={"command": scripts["command"]})
        summary = evolve(run, config, rec)
    finally:
        del os.environ["AGENT_STATE"]
    # 0.01 per step: after three steps the spend (0.03) is past 0.025, so no fourth step starts.
    assert summary.steps_taken == 3 and "max-cost" in summary.stop_reason
    assert summary.spend == pytest.approx(0.03)
    assert Path(scripts["state"]).read_text() == "3"


def test_step_timeout_is_recorded_and_a_missing_command_is_a_clear_error(tmp_path: Path, toy: Path,
                                                                         runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(toy), runs_root)
    with pytest.raises(AvoError, match=r"backend 'mock' needs --option command=\.\.\. \(or \$AVO_MOCK_COMMAND\)"):
        evolve(run, EvolveConfig(backend="mock", max_steps=1))
    marker = tmp_path / "grandchild.pid"
    # The step starts a grandchild that would outlive a plain kill; the whole group must die.
    command = f"sleep 60 & echo $! > {marker}; wait"
    summary = evolve(run, EvolveConfig(backend="mock", max_steps=1, step_timeout=1.0, options={"command": command}))
    assert summary.steps_taken == 1
    records = read_trajectory(run.paths)
    step = next(r for r in records if r["kind"] == "agent_step")
    assert step["outcome"] == "timeout" and "killed" in step["error"]
    assert not _alive(int(marker.read_text()))


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper that never comes in a container counts as dead)."""
    for _ in range(50):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.05)
    return True


def test_unknown_backend_names_the_installed_ones(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(toy), runs_root)
    with pytest.raises(AvoError, match="unknown backend 'nope'.*mock"):
        evolve(run, EvolveConfig(backend="nope"))


def test_cli_errors_are_clear(runs_root: Path, toy: Path) -> None:
    env = {**os.environ, "AVO_DISABLE_PLUGIN_AUTOLOAD": "1"}
    res = subprocess.run([sys.executable, "-m", "avo", "evolve", "--target", str(toy)], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "--backend NAME" in res.stderr
    res = subprocess.run([sys.executable, "-m", "avo", "evolve", "--target", str(toy), "--backend", "mock",
                          "--option", "oops"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "KEY=VALUE" in res.stderr
    res = subprocess.run([sys.executable, "-m", "avo", "evolve", "--target", str(toy), "--backend", "mock",
                          "--time", "soon"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "--time" in res.stderr


def test_help_does_not_import_heavy_modules() -> None:
    code = ("import sys\nsys.argv=['avo','--help']\nfrom avo.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('anthropic','openai','rich.live','avo.evolve','avo.dashboard') "
            "if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "evolve" in res.stdout
    assert res.stdout.strip().splitlines()[-1] == "[]"


def test_ctrl_c_during_the_evaluation_is_recorded_and_nothing_is_lost(tmp_path: Path, toy: Path,
                                                                      runs_root: Path) -> None:
    # This copy of the toy evaluator hangs on X = 5.5, so SIGINT lands while avo evaluates.
    marker = tmp_path / "evaluating"
    ev = toy / "eval.py"
    ev.write_text(ev.read_text().replace(
        '    print(f"evaluating X={x} Y={y}")',
        f'    if x == 5.5:\n        open({str(marker)!r}, "w").close()\n        import time; time.sleep(120)\n'
        '    print(f"evaluating X={x} Y={y}")'))
    agent = tmp_path / "agent.sh"
    agent.write_text("#!/bin/sh\nsed -i 's/^X = .*/X = 5.5/' solution.py\necho 'X to 5.5'\n")
    agent.chmod(0o755)
    # The evaluator signals through a file outside the sandbox: this run chooses no sandbox.
    env = {**os.environ, "AVO_DISABLE_PLUGIN_AUTOLOAD": "1", "AVO_RUNS_DIR": str(runs_root), "AVO_SANDBOX": "none"}
    proc = _avo(["--target", str(toy), "--backend", "mock", "--option", f"command={agent}", "--max-steps", "3"], env)
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), "the evaluation never started"
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    run = open_run(None, runs_root)
    records = read_trajectory(run.paths)
    # The submit had begun its evaluation: its step is used, recorded as interrupted.
    assert [(r["step"], r["outcome"]) for r in records if r["kind"] == "submit"] == [(1, "interrupted")]
    assert not [r for r in records if r["kind"] == "interrupted"]
    assert run.state.steps == 1 and [v.n for v in run.state.versions] == [0]
    assert not (run.paths.private / "child.pid").exists()
    assert "X = 1.0" in (run.paths.work / "solution.py").read_text()
    assert "+X = 5.5" in next(run.paths.rejected.glob("reverted-*.diff")).read_text()
