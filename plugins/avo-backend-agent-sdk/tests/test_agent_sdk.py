"""agent_sdk: option building and message parsing with the SDK's own classes, availability.
The real agent session (the CLI, a login, the network) is not exercised here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import avo_backend_agent_sdk as backend
import pytest


def _sdk() -> Any:
    """The SDK's own classes (only these two tests need the package)."""
    return pytest.importorskip("claude_agent_sdk", reason="claude-agent-sdk is not installed")


def test_options_confine_the_agent_to_the_run(tmp_path: Path) -> None:
    sdk = _sdk()
    opts = backend.build_options(cwd=tmp_path / "work", add_dir=tmp_path, options={"max_turns": "12"},
                                 model="claude-sonnet-4-6", tools=list(backend.DEFAULT_TOOLS),
                                 permission_mode="acceptEdits")
    assert isinstance(opts, sdk.ClaudeAgentOptions)
    assert opts.cwd == str(tmp_path / "work") and opts.add_dirs == [str(tmp_path)]
    assert opts.permission_mode == "acceptEdits" and "Bash" in opts.allowed_tools and opts.max_turns == 12
    assert opts.model == "claude-sonnet-4-6" and backend.APPEND_SYSTEM in opts.system_prompt["append"]


def test_messages_become_a_step_result() -> None:
    sdk = _sdk()
    c = backend.Collected()
    c.feed(sdk.SystemMessage(subtype="init", data={"session_id": "s-9"}))
    c.feed(sdk.AssistantMessage(content=[sdk.TextBlock(text="Looking."),
                                         sdk.ToolUseBlock(id="t1", name="Edit", input={})], model="m"))
    c.feed(sdk.ResultMessage(subtype="success", duration_ms=10, duration_api_ms=5, is_error=False, num_turns=4,
                             session_id="s-9", total_cost_usd=0.12, result="done.\nTuned X.",
                             usage={"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 7}))
    r = backend.to_step_result(c, 3.0, timed_out=False, timeout=60, crash=None)
    assert (r.status, r.message, r.input_tokens, r.output_tokens, r.cost_usd) == ("ok", "Tuned X.", 100, 7, 0.12)
    assert r.model_extra == {"num_turns": 4, "session_id": "s-9", "tool_calls": 1}
    bad = backend.Collected()
    bad.feed(sdk.ResultMessage(subtype="error_max_turns", duration_ms=1, duration_api_ms=1, is_error=True,
                               num_turns=30, session_id="s", result="hit the turn limit"))
    r = backend.to_step_result(bad, 1.0, timed_out=False, timeout=60, crash=None)
    assert r.status == "error" and "turn limit" in (r.error or "")
    r = backend.to_step_result(backend.Collected(), 60.0, timed_out=True, timeout=60, crash=None)
    assert r.status == "timeout"
    r = backend.to_step_result(backend.Collected(), 1.0, timed_out=False, timeout=60, crash="CLINotFoundError: x")
    assert r.status == "error" and r.error == "CLINotFoundError: x"


def test_availability_names_what_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ok, reason = backend.availability()
    assert ok == (backend.find_cli() is not None)
    monkeypatch.setattr(backend, "PACKAGE", "claude_agent_sdk_missing_for_test")
    monkeypatch.setenv("PATH", str(tmp_path))
    ok, reason = backend.availability()
    assert not ok and "claude-agent-sdk package is not installed" in (reason or "")
    info = backend.avo_backends()[0]
    assert not info.available and info.reason == reason
    assert backend.find_cli({"cli_path": str(tmp_path / "nope")}) is None
