"""avo backend ``api``: a self-contained agent loop on the Anthropic Messages API.

The model gets avo's tool box (:mod:`avo.agent_tools`: shell in ``work/`` with a timeout,
view/create/str_replace confined to ``work/``, evaluate through the run's ``avo-eval``) and
works until it stops calling tools; its last line is the commit message. The system
prompt and the tool list carry ``cache_control`` so every turn after the first reads them
from the prompt cache. Tokens (input, cache writes, cache reads, output) are counted and
priced with :data:`PRICES`; the SDK retries 429/5xx with exponential backoff
(``max_retries``). The key is ``$ANTHROPIC_API_KEY`` and is never printed.

Options: ``max_turns`` (default 60), ``max_tokens`` (per response, default 8192),
``max_retries`` (default 4), ``shell_timeout`` (default 300 s), ``price_in``/``price_out``
(USD per million tokens, for models missing from the table).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from avo import hookimpl
from avo.agent_tools import AGENT_SYSTEM, ToolBox, anthropic_tools, summary_line
from avo.errors import AvoError
from avo.models import BackendInfo, StepRequest, StepResult, SupervisorAnswer, SupervisorBrief

NAME = "api"
KEY_ENV = "ANTHROPIC_API_KEY"
DEFAULT_MODEL = "claude-sonnet-4-6"

# USD per million tokens (input, output), list prices. Cache writes cost 1.25x input, cache
# reads 0.1x input. Matched by the longest prefix of the model name. Sonnet 4.6 is assumed
# to keep Sonnet 4.5's price; override any entry with --option price_in/price_out.
PRICES: dict[str, tuple[float, float]] = {
    "claude-sonnet-4-6": (3.0, 15.0),
    "claude-opus-4-5": (5.0, 25.0),
    "claude-opus-4-1": (15.0, 75.0),
    "claude-opus-4": (15.0, 75.0),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-sonnet-4": (3.0, 15.0),
    "claude-3-7-sonnet": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
    "claude-3-5-haiku": (0.8, 4.0),
}
CACHE_WRITE = 1.25
CACHE_READ = 0.10


def price_of(model: str, options: dict[str, Any]) -> tuple[float, float] | None:
    """(input, output) USD per million tokens: options first, else the table."""
    if options.get("price_in") is not None and options.get("price_out") is not None:
        return float(options["price_in"]), float(options["price_out"])
    matches = [k for k in PRICES if model.startswith(k)]
    return PRICES[max(matches, key=len)] if matches else None


@dataclass
class Usage:
    """Token counts of one step, summed over its turns."""

    input: int = 0
    cache_write: int = 0
    cache_read: int = 0
    output: int = 0

    def add(self, u: Any) -> None:
        self.input += int(getattr(u, "input_tokens", 0) or 0)
        self.cache_write += int(getattr(u, "cache_creation_input_tokens", 0) or 0)
        self.cache_read += int(getattr(u, "cache_read_input_tokens", 0) or 0)
        self.output += int(getattr(u, "output_tokens", 0) or 0)

    def cost(self, price: tuple[float, float] | None) -> float:
        if price is None:
            return 0.0
        pin, pout = price
        return (self.input * pin + self.cache_write * pin * CACHE_WRITE + self.cache_read * pin * CACHE_READ
                + self.output * pout) / 1e6

    @property
    def total_input(self) -> int:
        return self.input + self.cache_write + self.cache_read


@hookimpl
def avo_backends() -> list[BackendInfo]:
    """Available when ``$ANTHROPIC_API_KEY`` is set (its value is never shown)."""
    has_key = bool(os.environ.get(KEY_ENV))
    return [BackendInfo(name=NAME, description="agent loop on the Anthropic Messages API (tools, prompt caching)",
                        needs=[f"${KEY_ENV}", "network access to the API (or --base-url)"],
                        available=has_key, reason=None if has_key else f"${KEY_ENV} is not set", costs_money=True)]


def _client(base_url: str | None, options: dict[str, Any]) -> Any:
    import anthropic

    key = os.environ.get(KEY_ENV)
    if not key:
        raise AvoError(f"the api backend needs ${KEY_ENV}")
    return anthropic.Anthropic(api_key=key, base_url=base_url or None,
                               max_retries=int(options.get("max_retries", 4)))


def _block_dict(block: Any) -> dict[str, Any]:
    if block.type == "text":
        return {"type": "text", "text": block.text}
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    return dict(block.model_dump(exclude_none=True))


@hookimpl
def avo_agent_step(backend: str, request: StepRequest) -> StepResult:
    """Run the tool loop until the model stops calling tools, the turn cap, or the timeout."""
    import anthropic

    opts = request.options
    model = request.model or DEFAULT_MODEL
    price = price_of(model, opts)
    client = _client(request.base_url, opts)
    started = time.monotonic()
    deadline = started + request.timeout
    box = ToolBox(request.work_dir, request.run_dir / "avo-eval", request.log_path,
                  shell_timeout=float(opts.get("shell_timeout", 300)), deadline=deadline,
                  eval_timeout=request.target.eval_timeout)
    tools = anthropic_tools()
    tools[-1]["cache_control"] = {"type": "ephemeral"}
    system = [{"type": "text", "text": AGENT_SYSTEM, "cache_control": {"type": "ephemeral"}}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": request.prompt}]
    usage = Usage()
    text, status, error, calls = "", "ok", None, 0
    max_turns = int(opts.get("max_turns", 60))
    with open(request.log_path, "a", encoding="utf-8") as log:
        for turn in range(max_turns):
            left = deadline - time.monotonic()
            if left <= 0:
                status, error = "timeout", f"the step ran past {request.timeout:g} s"
                break
            try:
                resp = client.messages.create(model=model, max_tokens=int(opts.get("max_tokens", 8192)),
                                              system=system, tools=tools, messages=messages, timeout=left)
            except anthropic.APITimeoutError:
                status, error = "timeout", f"the API call ran past the step timeout ({request.timeout:g} s)"
                break
            except anthropic.APIError as exc:
                status, error = "error", f"Messages API error: {type(exc).__name__}: {exc}"[:500]
                break
            usage.add(resp.usage)
            blocks = [_block_dict(b) for b in resp.content]
            messages.append({"role": "assistant", "content": blocks})
            texts = [b["text"] for b in blocks if b["type"] == "text" and b.get("text")]
            if texts:
                text = texts[-1]
                log.write(f"[turn {turn + 1}] {text}\n")
            uses = [b for b in blocks if b["type"] == "tool_use"]
            if not uses:
                break
            results = []
            for b in uses:
                calls += 1
                log.write(f"[turn {turn + 1}] tool {b['name']} {str(b['input'])[:500]}\n")
                log.flush()
                out = box.call(b["name"], b["input"] if isinstance(b["input"], dict) else {})
                results.append({"type": "tool_result", "tool_use_id": b["id"], "content": out})
            messages.append({"role": "user", "content": results})
        else:
            status, error = "error", f"the agent used all {max_turns} turns without finishing"
    return StepResult(status=status, message=summary_line(text, f"api step {request.step}"), error=error,
                      input_tokens=usage.total_input, output_tokens=usage.output, cost_usd=usage.cost(price),
                      wall_s=time.monotonic() - started, tool_calls=calls, cache_read_tokens=usage.cache_read,
                      cache_write_tokens=usage.cache_write, priced=price is not None)


@hookimpl
def avo_supervise(backend: str, brief: SupervisorBrief) -> SupervisorAnswer:
    """One Messages call without tools: the reviewer's answer is the redirect."""
    import anthropic

    model = brief.model or DEFAULT_MODEL
    client = _client(brief.base_url, brief.options)
    try:
        resp = client.messages.create(
            model=model, max_tokens=4096, timeout=brief.timeout,
            system="You review a stalled evolutionary search and answer with the redirect text only.",
            messages=[{"role": "user", "content": brief.prompt}])
    except anthropic.APIError as exc:
        raise AvoError(f"the api supervisor call failed: {type(exc).__name__}: {exc}") from None
    usage = Usage()
    usage.add(resp.usage)
    text = "\n".join(b.text for b in resp.content if b.type == "text")
    return SupervisorAnswer(redirect=text, input_tokens=usage.total_input, output_tokens=usage.output,
                            cost_usd=usage.cost(price_of(model, brief.options)))
