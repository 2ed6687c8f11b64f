"""The api backend against a local fake Messages API server (http.server on 127.0.0.1) with
the real ``anthropic`` SDK pointed at it: tool calls that view, edit and evaluate, prompt
caching, usage and cost, a 429 retried, and ``--max-cost`` stopping a run."""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import avo_backend_api as backend
import pytest

from avo.engine import start_run
from avo.evolve import EvolveConfig, evolve
from avo.plugins import all_backends, register, reset_plugin_manager, unregister
from avo.state import read_trajectory

TOY = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "toy"


class FakeMessages(BaseHTTPRequestHandler):
    """Answers POST /v1/messages from the conversation so far (stateless, except one 429)."""

    requests: list[dict[str, Any]] = []
    headers_seen: list[dict[str, str]] = []
    fail_next = 0

    def log_message(self, *args: Any) -> None:
        return None

    def _send(self, code: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        cls = type(self)
        if cls.fail_next > 0:
            cls.fail_next -= 1
            self._send(429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
                       {"retry-after-ms": "10"})
            return
        cls.requests.append(body)
        cls.headers_seen.append({k.lower(): v for k, v in self.headers.items()})
        msgs = body["messages"]
        content: list[dict[str, Any]]
        if "tools" not in body:  # the supervisor
            content = [{"type": "text", "text": "Try moving Y as well; X alone has plateaued."}]
            self._send(200, _message(content, "end_turn", first=True))
            return
        n = len(msgs)
        if n == 1:
            content = [{"type": "text", "text": "Let me look."},
                       {"type": "tool_use", "id": "tu1", "name": "view", "input": {"path": "solution.py"}}]
        elif n == 3:
            seen = msgs[-1]["content"][0]["content"]
            x = float(re.findall(r"X = ([0-9.]+)", seen)[0])
            content = [{"type": "tool_use", "id": "tu2", "name": "str_replace",
                        "input": {"path": "solution.py", "old_str": f"X = {x}", "new_str": f"X = {x + 2}"}}]
        elif n == 5:
            content = [{"type": "tool_use", "id": "tu3", "name": "evaluate", "input": {}},
                       {"type": "tool_use", "id": "tu4", "name": "view", "input": {"path": "../run.json"}}]
        else:
            content = [{"type": "text", "text": "Measured it.\nRaised X by 2 towards config_a's peak."}]
        self._send(200, _message(content, "tool_use" if n < 7 else "end_turn", first=n == 1))


def _message(content: list[dict[str, Any]], stop: str, first: bool) -> dict[str, Any]:
    return {"id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 1000, "output_tokens": 100,
                      "cache_creation_input_tokens": 2000 if first else 0,
                      "cache_read_input_tokens": 0 if first else 2000}}


@pytest.fixture
def server() -> Iterator[str]:
    FakeMessages.requests, FakeMessages.headers_seen, FakeMessages.fail_next = [], [], 0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeMessages)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("AVO_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-real-key")
    reset_plugin_manager()
    register(backend, "api")
    dest = tmp_path / "toy"
    shutil.copytree(TOY, dest, ignore=shutil.ignore_patterns("__pycache__"))
    try:
        yield dest
    finally:
        unregister("api")
        reset_plugin_manager()


def test_availability_follows_the_key_and_never_shows_it(toy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = next(b for b in all_backends() if b.name == "api")
    assert info.available and "sk-test" not in info.model_dump_json()
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    info = next(b for b in all_backends() if b.name == "api")
    assert not info.available and info.reason == "$ANTHROPIC_API_KEY is not set"


def test_tool_loop_edits_evaluates_and_is_accounted(toy: Path, server: str, tmp_path: Path) -> None:
    FakeMessages.fail_next = 1  # one 429 first: the SDK retries it
    run = start_run(str(toy), tmp_path / "runs")
    summary = evolve(run, EvolveConfig(backend="api", base_url=server, max_steps=1, model="claude-sonnet-4-6"))
    assert summary.steps_taken == 1 and summary.best_version == 1
    assert "X = 3.0" in (run.paths.work / "solution.py").read_text()
    reqs = FakeMessages.requests
    assert len(reqs) == 4 and FakeMessages.fail_next == 0
    auth = FakeMessages.headers_seen[0]
    assert "sk-test-not-a-real-key" in auth.get("x-api-key", "") + auth.get("authorization", "")
    first = reqs[0]
    assert first["model"] == "claude-sonnet-4-6" and "# avo — step 1" in first["messages"][0]["content"]
    assert first["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert first["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert {t["name"] for t in first["tools"]} == {"shell", "view", "create", "str_replace", "evaluate"}
    view_result = reqs[1]["messages"][2]["content"][0]
    assert view_result["tool_use_id"] == "tu1" and "X = 1.0" in view_result["content"]
    assert reqs[2]["messages"][4]["content"][0]["content"] == "edited solution.py"
    eval_result, escape = reqs[3]["messages"][6]["content"]
    assert "[exit 0]" in eval_result["content"]
    assert "outside the work directory" in escape["content"]  # ../run.json is not the agent's to read
    records = read_trajectory(run.paths)
    assert any(r["kind"] == "eval" and r["id"] != "seed" for r in records)  # the agent's evaluate went via avo-eval
    submit = next(r for r in records if r["kind"] == "submit")
    assert submit["message"] == "Raised X by 2 towards config_a's peak." and submit["outcome"] == "accepted"
    u = submit["usage"]
    # 4 responses: 4000 input, 2000 cache writes, 6000 cache reads, 400 output at $3/$15 per MTok.
    assert u["input_tokens"] == 12000 and u["output_tokens"] == 400 and u["tool_calls"] == 4
    assert u["cost_usd"] == pytest.approx((4000 * 3 + 2000 * 3 * 1.25 + 6000 * 3 * 0.1 + 400 * 15) / 1e6)


def test_max_cost_stops_the_run_on_reported_usage(toy: Path, server: str, tmp_path: Path) -> None:
    run = start_run(str(toy), tmp_path / "runs", stall_limit=1)
    per_step = (4000 * 3 + 2000 * 3 * 1.25 + 6000 * 3 * 0.1 + 400 * 15) / 1e6
    summary = evolve(run, EvolveConfig(backend="api", base_url=server, max_steps=10, max_cost=per_step * 1.5))
    assert summary.steps_taken == 2 and "max-cost" in summary.stop_reason
    assert summary.spend == pytest.approx(2 * per_step)
    assert "X = 5.0" in (run.paths.work / "solution.py").read_text()


def test_supervisor_answer_and_unknown_model_price(toy: Path, server: str, tmp_path: Path) -> None:
    from avo.models import SupervisorBrief

    brief = SupervisorBrief(run_dir=tmp_path, prompt="# Supervisor review", reason="stalled",
                            log_path=tmp_path / "s.log", base_url=server, model="some-other-model")
    answer = backend.avo_supervise(backend="api", brief=brief)
    assert answer is not None and answer.redirect.startswith("Try moving Y")
    assert answer.cost_usd == 0.0 and answer.input_tokens == 3000
    assert backend.price_of("some-other-model", {"price_in": "2", "price_out": "8"}) == (2.0, 8.0)
    assert backend.price_of("claude-haiku-4-5-20251001", {}) == (1.0, 5.0)
