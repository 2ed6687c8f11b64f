"""avo backend ``claude_cli``: Claude Code headless is the agent of each step.

Each step runs ``claude -p PROMPT --output-format stream-json --verbose`` in ``work/`` with
a permission mode and an allowed-tool list fit for unattended edits of ``work/``, and
``--add-dir`` for the run directory (kb/, NOTES.md, avo-eval). The stream's final
``{"type": "result", ...}`` message carries the summary (``result``), ``is_error``,
``usage``, ``total_cost_usd``, ``num_turns`` and ``session_id``. Past the step timeout the
whole process group is killed and the step is a ``timeout``.

Options (``--option KEY=VALUE``): ``claude`` (the executable; else ``$AVO_CLAUDE_BIN``,
else ``claude`` on PATH), ``permission_mode`` (default ``acceptEdits``), ``allowed_tools``
(comma-separated, default ``Bash,Read,Edit,Write,Glob,Grep``), ``max_turns``.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from avo import hookimpl
from avo.agent_tools import run_process, summary_line
from avo.models import BackendInfo, StepRequest, StepResult, SupervisorAnswer, SupervisorBrief

NAME = "claude_cli"
BIN_ENV = "AVO_CLAUDE_BIN"
DEFAULT_TOOLS = "Bash,Read,Edit,Write,Glob,Grep"
SUPERVISOR_TOOLS = "Read,Glob,Grep"
APPEND_SYSTEM = ("You are the variation operator of an avo run working unattended: nobody will answer "
                 "questions. Edit only inside the current directory (work/). End with one line saying "
                 "what you changed and why; avo scores the work tree itself.")


def find_claude(options: dict[str, Any] | None = None) -> str | None:
    """The claude executable: ``--option claude=``, ``$AVO_CLAUDE_BIN``, or PATH."""
    explicit = (options or {}).get("claude") or os.environ.get(BIN_ENV)
    if explicit:
        return str(explicit) if Path(str(explicit)).is_file() else shutil.which(str(explicit))
    return shutil.which("claude")


@hookimpl
def avo_backends() -> list[BackendInfo]:
    """Available when the claude CLI is found (its login or key is its own business)."""
    exe = find_claude()
    return [BackendInfo(
        name=NAME, description="Claude Code headless (claude -p, stream-json) per step",
        needs=["the claude CLI on PATH (npm install -g @anthropic-ai/claude-code), logged in or with "
               "ANTHROPIC_API_KEY set"],
        available=exe is not None,
        reason=None if exe else f"claude not found on PATH (or ${BIN_ENV})",
        costs_money=True,
    )]


@dataclass
class StreamSummary:
    """What the stream-json output said."""

    result: dict[str, Any] | None = None
    session_id: str | None = None
    model: str | None = None
    assistant_messages: int = 0
    tool_uses: int = 0
    texts: list[str] = field(default_factory=list)
    bad_lines: int = 0

    def feed(self, line: str) -> None:
        """Take one line of ``--output-format stream-json``."""
        line = line.strip()
        if not line:
            return
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            self.bad_lines += 1
            return
        if not isinstance(msg, dict):
            return
        kind = msg.get("type")
        if kind == "system" and msg.get("subtype") == "init":
            self.session_id = msg.get("session_id") or self.session_id
            self.model = msg.get("model") or self.model
        elif kind == "assistant":
            self.assistant_messages += 1
            content = (msg.get("message") or {}).get("content") or []
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    self.tool_uses += 1
                elif isinstance(block, dict) and block.get("type") == "text" and block.get("text"):
                    self.texts.append(str(block["text"]))
        elif kind == "result":
            self.result = msg
            self.session_id = msg.get("session_id") or self.session_id

    def usage(self) -> tuple[int, int, float]:
        """(input tokens including cache reads and writes, output tokens, cost in USD)."""
        if not self.result:
            return 0, 0, 0.0
        u = self.result.get("usage") or {}
        tin = sum(int(u.get(k) or 0) for k in ("input_tokens", "cache_creation_input_tokens",
                                                 "cache_read_input_tokens"))
        return tin, int(u.get("output_tokens") or 0), float(self.result.get("total_cost_usd") or 0.0)


def build_argv(exe: str, prompt: str, *, add_dir: Path, options: dict[str, Any], model: str | None,
               tools: str, permission_mode: str) -> list[str]:
    """The headless command line."""
    argv = [exe, "-p", prompt, "--output-format", "stream-json", "--verbose",
            "--permission-mode", permission_mode, "--allowedTools", tools,
            "--add-dir", str(add_dir), "--append-system-prompt", APPEND_SYSTEM]
    if model:
        argv += ["--model", model]
    if options.get("max_turns"):
        argv += ["--max-turns", str(int(options["max_turns"]))]
    return argv


def _run(argv: list[str], cwd: Path, timeout: float, log: Path) -> tuple[StreamSummary, Any]:
    stream = StreamSummary()
    env = {**os.environ}
    res = run_process(argv, cwd=cwd, timeout=timeout, log_path=log, env=env, on_line=stream.feed)
    return stream, res


def _missing() -> StepResult:
    return StepResult(status="error", error=f"claude not found on PATH (or ${BIN_ENV})")


@hookimpl
def avo_agent_step(backend: str, request: StepRequest) -> StepResult:
    """Run Claude Code headless in ``work/`` until it stops or the timeout kills it."""
    exe = find_claude(request.options)
    if exe is None:
        return _missing()
    argv = build_argv(exe, request.prompt, add_dir=request.run_dir, options=request.options, model=request.model,
                      tools=str(request.options.get("allowed_tools") or DEFAULT_TOOLS),
                      permission_mode=str(request.options.get("permission_mode") or "acceptEdits"))
    stream, res = _run(argv, request.work_dir, request.timeout, request.log_path)
    tin, tout, cost = stream.usage()
    text = str((stream.result or {}).get("result") or "") or ("\n".join(stream.texts[-1:]))
    extra = {"num_turns": (stream.result or {}).get("num_turns"), "session_id": stream.session_id,
             "tool_calls": stream.tool_uses}
    if res.timed_out:
        return StepResult(status="timeout", message=summary_line(text, ""), input_tokens=tin, output_tokens=tout,
                          cost_usd=cost, wall_s=res.wall_s, **extra,
                          error=f"claude ran past the step timeout ({request.timeout:g} s); "
                                "its process group was killed")
    if stream.result is None:
        return StepResult(status="error", wall_s=res.wall_s, **extra,
                          error=f"claude exited with status {res.returncode} without a result message "
                                f"(see {request.log_path})")
    if stream.result.get("is_error") or res.returncode != 0:
        why = summary_line(text, str(stream.result.get("subtype") or "error"))
        return StepResult(status="error", message=summary_line(text, ""), input_tokens=tin, output_tokens=tout,
                          cost_usd=cost, wall_s=res.wall_s, error=f"claude reported an error: {why}", **extra)
    return StepResult(status="ok", message=summary_line(text, "claude step"), input_tokens=tin,
                      output_tokens=tout, cost_usd=cost, wall_s=res.wall_s, **extra)


@hookimpl
def avo_supervise(backend: str, brief: SupervisorBrief) -> SupervisorAnswer:
    """A read-only Claude Code session reviews the trajectory; its final text is the redirect."""
    from avo.errors import AvoError

    exe = find_claude(brief.options)
    if exe is None:
        raise AvoError(f"claude not found on PATH (or ${BIN_ENV}); cannot answer the supervisor brief")
    prompt = brief.prompt + ("\n\nAnswer with the redirect text itself as your final message; avo records it "
                             "(do not run `avo supervisor record` yourself).")
    argv = build_argv(exe, prompt, add_dir=brief.run_dir, options=brief.options, model=brief.model,
                      tools=SUPERVISOR_TOOLS, permission_mode="default")
    stream, res = _run(argv, brief.run_dir, brief.timeout, brief.log_path)
    if res.timed_out:
        raise AvoError(f"the claude supervisor ran past {brief.timeout:g} s (killed); see {brief.log_path}")
    if stream.result is None or stream.result.get("is_error"):
        raise AvoError(f"the claude supervisor failed (exit {res.returncode}); see {brief.log_path}")
    tin, tout, cost = stream.usage()
    return SupervisorAnswer(redirect=str(stream.result.get("result") or ""), input_tokens=tin, output_tokens=tout,
                            cost_usd=cost)
