"""avo backend ``agent_sdk``: Claude Code in-process through the ``claude-agent-sdk`` package.

``query(prompt=..., options=ClaudeAgentOptions(cwd=work/, add_dirs=[run dir], ...))`` runs
the agent; the final ``ResultMessage`` carries the summary, ``usage``, ``total_cost_usd``,
``num_turns`` and ``session_id``. The SDK drives the Claude Code CLI (the wheel bundles
one; else ``claude`` on PATH or ``--option cli_path=``). When the package or the CLI is
missing, the backend reports "not available" with the reason.
"""

from __future__ import annotations

import importlib.util
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from avo import hookimpl
from avo.agent_tools import summary_line
from avo.errors import AvoError
from avo.models import BackendInfo, StepRequest, StepResult, SupervisorAnswer, SupervisorBrief

NAME = "agent_sdk"
PACKAGE = "claude_agent_sdk"
DEFAULT_TOOLS = ["Bash", "Read", "Edit", "Write", "Glob", "Grep"]
SUPERVISOR_TOOLS = ["Read", "Glob", "Grep"]
APPEND_SYSTEM = ("You are the variation operator of an avo run working unattended: nobody will answer "
                 "questions. Edit only inside the current directory (work/). End with one line saying "
                 "what you changed and why; avo scores the work tree itself.")


def find_cli(options: dict[str, Any] | None = None) -> str | None:
    """The CLI the SDK will run: ``cli_path`` option, the wheel's bundled one, or PATH."""
    explicit = (options or {}).get("cli_path")
    if explicit:
        return str(explicit) if Path(str(explicit)).is_file() else None
    spec = importlib.util.find_spec(PACKAGE)
    if spec is not None and spec.origin:
        bundled = Path(spec.origin).parent / "_bundled" / "claude"
        if bundled.is_file():
            return str(bundled)
    return shutil.which("claude")


def availability() -> tuple[bool, str | None]:
    """(available, reason) without importing the SDK."""
    if importlib.util.find_spec(PACKAGE) is None:
        return False, "the claude-agent-sdk package is not installed (pip install 'avo-backend-agent-sdk[sdk]')"
    if find_cli() is None:
        return False, "no Claude Code CLI: the SDK's bundled one is missing and claude is not on PATH"
    return True, None


@hookimpl
def avo_backends() -> list[BackendInfo]:
    """Available when the SDK and a CLI are present (a login or key is the CLI's business)."""
    ok, reason = availability()
    return [BackendInfo(name=NAME, description="Claude Code in-process via the claude-agent-sdk package",
                        needs=["the claude-agent-sdk package", "the Claude Code CLI (bundled or on PATH), "
                               "logged in or with ANTHROPIC_API_KEY"],
                        available=ok, reason=reason, costs_money=True)]


def build_options(*, cwd: Path, add_dir: Path, options: dict[str, Any], model: str | None, tools: list[str],
                  permission_mode: str) -> Any:
    """The ``ClaudeAgentOptions`` of a step or a supervisor review."""
    from claude_agent_sdk import ClaudeAgentOptions

    kwargs: dict[str, Any] = {
        "cwd": str(cwd), "add_dirs": [str(add_dir)], "allowed_tools": tools,
        "permission_mode": permission_mode,
        "system_prompt": {"type": "preset", "preset": "claude_code", "append": APPEND_SYSTEM},
    }
    if model:
        kwargs["model"] = model
    if options.get("max_turns"):
        kwargs["max_turns"] = int(options["max_turns"])
    if options.get("max_budget_usd"):
        kwargs["max_budget_usd"] = float(options["max_budget_usd"])
    if options.get("cli_path"):
        kwargs["cli_path"] = str(options["cli_path"])
    return ClaudeAgentOptions(**kwargs)


@dataclass
class Collected:
    """What the message stream said."""

    result: Any = None
    texts: list[str] = field(default_factory=list)
    tool_uses: int = 0
    session_id: str | None = None

    def feed(self, message: Any) -> None:
        """Take one SDK message (AssistantMessage, SystemMessage, ResultMessage, ...)."""
        kind = type(message).__name__
        if kind == "AssistantMessage":
            for block in getattr(message, "content", []) or []:
                bk = type(block).__name__
                text = getattr(block, "text", None)
                if bk == "TextBlock" and text:
                    self.texts.append(str(text))
                elif bk == "ToolUseBlock":
                    self.tool_uses += 1
        elif kind == "SystemMessage" and getattr(message, "subtype", None) == "init":
            self.session_id = (getattr(message, "data", {}) or {}).get("session_id") or self.session_id
        elif kind == "ResultMessage":
            self.result = message
            self.session_id = getattr(message, "session_id", None) or self.session_id

    def usage(self) -> tuple[int, int, float]:
        if self.result is None:
            return 0, 0, 0.0
        u = getattr(self.result, "usage", None) or {}
        tin = sum(int(u.get(k) or 0) for k in ("input_tokens", "cache_creation_input_tokens",
                                                 "cache_read_input_tokens"))
        return tin, int(u.get("output_tokens") or 0), float(getattr(self.result, "total_cost_usd", 0) or 0.0)

    def text(self) -> str:
        return str(getattr(self.result, "result", "") or "") or (self.texts[-1] if self.texts else "")


async def _collect(prompt: str, options: Any, sink: Collected) -> None:
    from claude_agent_sdk import query

    async for message in query(prompt=prompt, options=options):
        sink.feed(message)


def to_step_result(c: Collected, wall: float, *, timed_out: bool, timeout: float, crash: str | None) -> StepResult:
    """Turn the collected stream into what avo records."""
    tin, tout, cost = c.usage()
    extra = {"num_turns": getattr(c.result, "num_turns", None), "session_id": c.session_id,
             "tool_calls": c.tool_uses}
    message = summary_line(c.text(), "")
    if timed_out:
        return StepResult(status="timeout", message=message, input_tokens=tin, output_tokens=tout, cost_usd=cost,
                          wall_s=wall, error=f"the agent ran past the step timeout ({timeout:g} s)", **extra)
    if crash is not None or c.result is None:
        return StepResult(status="error", message=message, input_tokens=tin, output_tokens=tout, cost_usd=cost,
                          wall_s=wall, error=crash or "the SDK stream ended without a result message", **extra)
    if getattr(c.result, "is_error", False):
        return StepResult(status="error", message=message, input_tokens=tin, output_tokens=tout, cost_usd=cost,
                          wall_s=wall, error=f"the agent reported an error: {summary_line(c.text(), 'error')}",
                          **extra)
    return StepResult(status="ok", message=message or "agent_sdk step", input_tokens=tin, output_tokens=tout,
                      cost_usd=cost, wall_s=wall, **extra)


def _run(prompt: str, options: Any, timeout: float) -> tuple[Collected, bool, str | None, float]:
    import asyncio  # here, not at import: every avo command loads this plugin, ~20 ms for asyncio

    sink = Collected()
    started = time.monotonic()
    timed_out, crash = False, None
    try:
        # wait_for cancels the query, and the SDK's transport terminates its CLI process.
        asyncio.run(asyncio.wait_for(_collect(prompt, options, sink), timeout))
    except (asyncio.TimeoutError, TimeoutError):
        timed_out = True
    except Exception as exc:  # the CLI missing, a login problem, a broken stream
        crash = f"{type(exc).__name__}: {exc}"[:500]
    return sink, timed_out, crash, time.monotonic() - started


@hookimpl
def avo_agent_step(backend: str, request: StepRequest) -> StepResult:
    """Run one agent session in ``work/``."""
    ok, reason = availability()
    if not ok:
        raise AvoError(f"the agent_sdk backend cannot run: {reason}")
    opts = build_options(cwd=request.work_dir, add_dir=request.run_dir, options=request.options, model=request.model,
                         tools=list(DEFAULT_TOOLS), permission_mode=str(request.options.get("permission_mode")
                                                                         or "acceptEdits"))
    sink, timed_out, crash, wall = _run(request.prompt, opts, request.timeout)
    request.log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(request.log_path, "a", encoding="utf-8") as log:
        log.write("\n".join(sink.texts) + f"\n[avo] result: {sink.text()[:2000]}\n")
    return to_step_result(sink, wall, timed_out=timed_out, timeout=request.timeout, crash=crash)


@hookimpl
def avo_supervise(backend: str, brief: SupervisorBrief) -> SupervisorAnswer:
    """A read-only session reviews the trajectory; its final text is the redirect."""
    ok, reason = availability()
    if not ok:
        raise AvoError(f"the agent_sdk backend cannot run: {reason}")
    opts = build_options(cwd=brief.run_dir, add_dir=brief.run_dir, options=brief.options, model=brief.model,
                         tools=list(SUPERVISOR_TOOLS), permission_mode="default")
    prompt = brief.prompt + "\n\nAnswer with the redirect text itself as your final message; avo records it."
    sink, timed_out, crash, _ = _run(prompt, opts, brief.timeout)
    if timed_out or crash or sink.result is None or getattr(sink.result, "is_error", False):
        raise AvoError(f"the agent_sdk supervisor failed: {crash or ('timeout' if timed_out else 'no result')}")
    tin, tout, cost = sink.usage()
    return SupervisorAnswer(redirect=sink.text(), input_tokens=tin, output_tokens=tout, cost_usd=cost)
