"""The openai backend against a local fake chat-completions server with the real ``openai``
SDK: tool calls that view, edit and evaluate; usage priced by options or reported by the
server; ``--max-cost`` stopping a run."""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import avo_backend_openai as backend
import pytest

from avo.engine import start_run
from avo.errors import AvoError
from avo.evolve import EvolveConfig, evolve
from avo.models import SupervisorBrief
from avo.plugins import register, reset_plugin_manager, unregister
from avo.state import read_trajectory

TOY = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "toy"


def _call(cid: str, name: str, args: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


class FakeChat(BaseHTTPRequestHandler):
    requests: list[dict[str, Any]] = []
    report_cost: float | None = None
    fail_next = 0

    def log_message(self, *args: Any) -> None:
        return None

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("retry-after-ms", "10")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        cls = type(self)
        if cls.fail_next:
            cls.fail_next -= 1
            self._send(503, {"error": {"message": "warming up", "type": "server_error"}})
            return
        cls.requests.append(body)
        msgs = body["messages"]
        n = len(msgs)
        content: str | None = None
        calls: list[dict[str, Any]] = []
        if "tools" not in body:
            content = "Direction 1: tune Y. Direction 2: simplify."
        elif n == 2:
            calls = [_call("c1", "view", json.dumps({"path": "solution.py"}))]
        elif n == 4:
            y = float(re.findall(r"Y = ([0-9.]+)", msgs[-1]["content"])[0])
            calls = [_call("c2", "str_replace", json.dumps({"path": "solution.py", "old_str": f"Y = {y}",
                                                            "new_str": f"Y = {y + 1}"}))]
        elif n == 6:
            calls = [_call("c3", "evaluate", "{}"), _call("c4", "create", "{not json")]
        else:
            content = "Raised Y by one towards config_b's peak."
        usage: dict[str, Any] = {"prompt_tokens": 500, "completion_tokens": 50, "total_tokens": 550}
        if cls.report_cost is not None:
            usage["cost"] = cls.report_cost
        self._send(200, {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": body["model"],
                         "choices": [{"index": 0, "finish_reason": "tool_calls" if calls else "stop",
                                      "message": {"role": "assistant", "content": content,
                                                  **({"tool_calls": calls} if calls else {})}}],
                         "usage": usage})


@pytest.fixture
def server() -> Iterator[str]:
    FakeChat.requests, FakeChat.report_cost, FakeChat.fail_next = [], None, 0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeChat)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("AVO_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    reset_plugin_manager()
    register(backend, "openai")
    dest = tmp_path / "toy"
    shutil.copytree(TOY, dest, ignore=shutil.ignore_patterns("__pycache__"))
    try:
        yield dest
    finally:
        unregister("openai")
        reset_plugin_manager()


def test_tool_loop_against_a_local_server(toy: Path, server: str, tmp_path: Path) -> None:
    FakeChat.fail_next = 1  # a 503 first: the SDK retries it
    run = start_run(str(toy), tmp_path / "runs")
    summary = evolve(run, EvolveConfig(backend="openai", base_url=server, model="qwen2.5-coder", max_steps=1,
                                       seed=7, options={"price_in": "1", "price_out": "2", "temperature": "0.2"}))
    assert summary.steps_taken == 1 and summary.best_version == 1
    assert "Y = 2.0" in (run.paths.work / "solution.py").read_text()
    reqs = FakeChat.requests
    assert len(reqs) == 4 and reqs[0]["model"] == "qwen2.5-coder" and reqs[0]["seed"] == 8
    assert reqs[0]["temperature"] == 0.2
    assert {t["function"]["name"] for t in reqs[0]["tools"]} == {"shell", "view", "create", "str_replace", "evaluate"}
    assert reqs[0]["messages"][0]["role"] == "system" and "# avo — step 1" in reqs[0]["messages"][1]["content"]
    assert "Y = 1.0" in reqs[1]["messages"][3]["content"] and reqs[1]["messages"][3]["tool_call_id"] == "c1"
    last = reqs[3]["messages"]
    assert "[exit 0]" in last[-2]["content"] and "not valid JSON" in last[-1]["content"]
    submit = next(r for r in read_trajectory(run.paths) if r["kind"] == "submit")
    assert submit["message"] == "Raised Y by one towards config_b's peak."
    u = submit["usage"]
    assert u["input_tokens"] == 2000 and u["output_tokens"] == 200 and u["tool_calls"] == 4
    assert u["cost_usd"] == pytest.approx((2000 * 1 + 200 * 2) / 1e6)


def test_max_cost_stops_on_the_servers_reported_cost(toy: Path, server: str, tmp_path: Path) -> None:
    FakeChat.report_cost = 0.004  # per response; 4 responses per step
    run = start_run(str(toy), tmp_path / "runs")
    summary = evolve(run, EvolveConfig(backend="openai", base_url=server, model="m", max_steps=10, max_cost=0.02))
    assert summary.steps_taken == 2 and "max-cost" in summary.stop_reason
    assert summary.spend == pytest.approx(0.032)
    assert "Y = 3.0" in (run.paths.work / "solution.py").read_text()


def test_supervisor_and_clear_errors(toy: Path, server: str, tmp_path: Path) -> None:
    brief = SupervisorBrief(run_dir=tmp_path, prompt="# Supervisor review", reason="stalled",
                            log_path=tmp_path / "s.log", base_url=server, model="m")
    answer = backend.avo_supervise(backend="openai", brief=brief)
    assert answer is not None and answer.redirect.startswith("Direction 1") and answer.input_tokens == 500
    with pytest.raises(AvoError, match="needs an endpoint"):
        backend.avo_supervise(backend="openai", brief=brief.model_copy(update={"base_url": None}))
    with pytest.raises(AvoError, match="needs --model"):
        backend.avo_supervise(backend="openai", brief=brief.model_copy(update={"model": None}))
