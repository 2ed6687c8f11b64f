"""Built-in backend ``mock``: a shell command is the agent. This is how CI drives full runs.

Each step runs the command (``--option command=...`` or ``$AVO_MOCK_COMMAND``) with a shell
in ``work/`` and these environment variables:

- ``AVO_RUN_DIR``, ``AVO_WORK_DIR``, ``AVO_EVAL`` (the run's avo-eval), ``AVO_STEP``,
  ``AVO_PROMPT_FILE`` (the variation prompt), ``AVO_LOG_FILE``, ``AVO_TIMEOUT``,
  ``AVO_SEED``, ``AVO_MODEL``, ``AVO_BASE_URL`` (empty when unset).

Its last line of stdout is the one-line message; when that line is a JSON object, its
``message``, ``input_tokens``, ``output_tokens`` and ``cost_usd`` are read (so a script can
play a paid backend). A non-zero exit is an ``error`` step; past the timeout the whole
process group is killed and the step is a ``timeout``.

A supervisor brief runs ``--option supervisor_command=...`` or
``$AVO_MOCK_SUPERVISOR_COMMAND`` with ``AVO_BRIEF_FILE`` and ``AVO_SUPERVISOR_REASON``;
its stdout (or the ``redirect`` of a final JSON line) is the redirect.
"""

from __future__ import annotations

import json
import os
from typing import Any

from avo.agent_tools import run_process
from avo.errors import AvoError
from avo.hookspecs import hookimpl
from avo.models import BackendInfo, StepRequest, StepResult, SupervisorAnswer, SupervisorBrief

NAME = "mock"
COMMAND_ENV = "AVO_MOCK_COMMAND"
SUPERVISOR_ENV = "AVO_MOCK_SUPERVISOR_COMMAND"


@hookimpl
def avo_backends() -> list[BackendInfo]:
    """Always available: it needs only a command to run."""
    return [BackendInfo(
        name=NAME,
        description="runs a shell command per step (CI, scripted agents); no model, no cost",
        needs=[f"a command: --option command=... or ${COMMAND_ENV}"],
        available=True,
        required_options={"command": COMMAND_ENV},
    )]


def _command(options: dict[str, Any], key: str, env: str, what: str) -> str:
    command = options.get(key) or os.environ.get(env)
    if not command or not str(command).strip():
        raise AvoError(f"the mock backend needs {what}: pass --option {key}='...' or set ${env}")
    return str(command)


def _last_json(stdout: str) -> tuple[dict[str, Any] | None, str]:
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        return None, ""
    last = lines[-1].strip()
    if last.startswith("{"):
        try:
            data = json.loads(last)
        except json.JSONDecodeError:
            return None, last
        if isinstance(data, dict):
            return data, last
    return None, last


def _number(data: dict[str, Any], key: str) -> float:
    value = data.get(key, 0)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


@hookimpl
def avo_agent_step(backend: str, request: StepRequest) -> StepResult:
    """Run the scripted agent once in ``work/``."""
    command = _command(request.options, "command", COMMAND_ENV, "a step command")
    prompt_file = request.log_path.with_suffix(".prompt.md")
    prompt_file.parent.mkdir(parents=True, exist_ok=True)
    prompt_file.write_text(request.prompt, encoding="utf-8")
    env = {
        **os.environ,
        "AVO_RUN_DIR": str(request.run_dir), "AVO_WORK_DIR": str(request.work_dir),
        "AVO_EVAL": str(request.run_dir / "avo-eval"), "AVO_STEP": str(request.step),
        "AVO_PROMPT_FILE": str(prompt_file), "AVO_LOG_FILE": str(request.log_path),
        "AVO_TIMEOUT": f"{request.timeout:g}", "AVO_SEED": "" if request.seed is None else str(request.seed),
        "AVO_MODEL": request.model or "", "AVO_BASE_URL": request.base_url or "",
    }
    res = run_process([command], cwd=request.work_dir, timeout=request.timeout, log_path=request.log_path,
                      env=env, shell=True)
    data, last = _last_json(res.stdout)
    message = str(data.get("message", "")) if data else last
    usage = {k: _number(data, k) for k in ("input_tokens", "output_tokens", "cost_usd")} if data else {}
    if res.timed_out:
        status, error = "timeout", f"the step command ran past {request.timeout:g} s; its process group was killed"
    elif res.returncode != 0:
        status, error = "error", f"the step command exited with status {res.returncode}"
    else:
        status, error = "ok", None
    return StepResult(status=status, message=message[:300], error=error, wall_s=res.wall_s,
                      input_tokens=int(usage.get("input_tokens", 0)), output_tokens=int(usage.get("output_tokens", 0)),
                      cost_usd=usage.get("cost_usd", 0.0))


@hookimpl
def avo_supervise(backend: str, brief: SupervisorBrief) -> SupervisorAnswer:
    """Answer a brief with the supervisor command's output."""
    command = _command(brief.options, "supervisor_command", SUPERVISOR_ENV, "a supervisor command")
    brief_file = brief.log_path.with_suffix(".brief.md")
    brief_file.parent.mkdir(parents=True, exist_ok=True)
    brief_file.write_text(brief.prompt, encoding="utf-8")
    env = {**os.environ, "AVO_RUN_DIR": str(brief.run_dir), "AVO_BRIEF_FILE": str(brief_file),
           "AVO_SUPERVISOR_REASON": brief.reason, "AVO_LOG_FILE": str(brief.log_path)}
    res = run_process([command], cwd=brief.run_dir, timeout=brief.timeout, log_path=brief.log_path, env=env,
                      shell=True)
    if res.timed_out:
        raise AvoError(f"the mock supervisor command ran past {brief.timeout:g} s (killed)")
    if res.returncode != 0:
        raise AvoError(f"the mock supervisor command exited with status {res.returncode}; see {brief.log_path}")
    data, _ = _last_json(res.stdout)
    text = str(data.get("redirect", "")) if data else res.stdout.strip()
    usage = data or {}
    return SupervisorAnswer(redirect=text, input_tokens=int(_number(usage, "input_tokens")),
                            output_tokens=int(_number(usage, "output_tokens")), cost_usd=_number(usage, "cost_usd"))
