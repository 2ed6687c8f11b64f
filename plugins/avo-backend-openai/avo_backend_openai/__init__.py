"""avo backend ``openai``: the agent loop for any OpenAI-compatible chat-completions endpoint.

Local servers (vLLM, llama.cpp, Ollama's ``/v1``) and hosted ones, through the ``openai``
SDK with ``--base-url`` and ``--model``. The model gets avo's tool box
(:mod:`avo.agent_tools`) as function tools and works until it answers without tool calls.
Tokens come from each response's ``usage``; cost is ``usage.cost`` when the server reports
one, else tokens times ``price_in``/``price_out`` (USD per million tokens, default 0).
The SDK retries 429/5xx (``max_retries``). The key (``$OPENAI_API_KEY``) is never printed.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from avo import hookimpl
from avo.agent_tools import AGENT_SYSTEM, ToolBox, openai_tools, summary_line
from avo.errors import AvoError
from avo.models import BackendInfo, StepRequest, StepResult, SupervisorAnswer, SupervisorBrief

NAME = "openai"
KEY_ENV = "OPENAI_API_KEY"
URL_ENV = "OPENAI_BASE_URL"
LOCAL_KEY = "not-needed"  # local servers ignore the key, but the SDK insists on one


@hookimpl
def avo_backends() -> list[BackendInfo]:
    """Always installable; it needs an endpoint (``--base-url``) or ``$OPENAI_API_KEY``."""
    ready = bool(os.environ.get(KEY_ENV) or os.environ.get(URL_ENV))
    return [BackendInfo(
        name=NAME, description="agent loop on any OpenAI-compatible chat-completions endpoint (vLLM, llama.cpp, "
                               "Ollama, hosted)",
        needs=["--base-url URL (or $OPENAI_BASE_URL) and --model", f"${KEY_ENV} for hosted endpoints"],
        available=True,
        reason=None if ready else f"no ${KEY_ENV} or ${URL_ENV}: pass --base-url for a local server",
        costs_money=bool(os.environ.get(KEY_ENV)),
    )]


def _client(base_url: str | None, options: dict[str, Any]) -> Any:
    import openai

    url = base_url or os.environ.get(URL_ENV)
    key = os.environ.get(KEY_ENV)
    if not url and not key:
        raise AvoError(f"the openai backend needs an endpoint: --base-url URL (local server) or ${KEY_ENV}")
    return openai.OpenAI(api_key=key or LOCAL_KEY, base_url=url or None,
                         max_retries=int(options.get("max_retries", 4)))


def _model(model: str | None) -> str:
    if not model:
        raise AvoError("the openai backend needs --model (the name the endpoint serves)")
    return model


def _cost(usage: Any, options: dict[str, Any]) -> tuple[int, int, float]:
    if usage is None:
        return 0, 0, 0.0
    tin = int(getattr(usage, "prompt_tokens", 0) or 0)
    tout = int(getattr(usage, "completion_tokens", 0) or 0)
    reported = getattr(usage, "cost", None)
    if reported is None and getattr(usage, "model_extra", None):
        reported = usage.model_extra.get("cost")
    if isinstance(reported, (int, float)):
        return tin, tout, float(reported)
    pin, pout = float(options.get("price_in", 0) or 0), float(options.get("price_out", 0) or 0)
    return tin, tout, (tin * pin + tout * pout) / 1e6


def _args(raw: str | None) -> dict[str, Any] | str:
    try:
        data = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        return f"error: the tool arguments are not valid JSON ({exc})"
    return data if isinstance(data, dict) else "error: the tool arguments must be a JSON object"


@hookimpl
def avo_agent_step(backend: str, request: StepRequest) -> StepResult:
    """Run the tool loop until the model answers without tool calls, the turn cap, or the timeout."""
    import openai

    opts = request.options
    model = _model(request.model)
    client = _client(request.base_url, opts)
    started = time.monotonic()
    deadline = started + request.timeout
    box = ToolBox(request.work_dir, request.run_dir / "avo-eval", request.log_path,
                  shell_timeout=float(opts.get("shell_timeout", 300)), deadline=deadline,
                  eval_timeout=request.target.eval_timeout)
    messages: list[dict[str, Any]] = [{"role": "system", "content": AGENT_SYSTEM},
                                      {"role": "user", "content": request.prompt}]
    tools = openai_tools()
    tin = tout = calls = 0
    cost = 0.0
    text, status, error = "", "ok", None
    max_turns = int(opts.get("max_turns", 60))
    extra: dict[str, Any] = {}
    if opts.get("temperature") is not None:
        extra["temperature"] = float(opts["temperature"])
    if request.seed is not None:
        extra["seed"] = request.seed
    with open(request.log_path, "a", encoding="utf-8") as log:
        for turn in range(max_turns):
            left = deadline - time.monotonic()
            if left <= 0:
                status, error = "timeout", f"the step ran past {request.timeout:g} s"
                break
            try:
                resp = client.chat.completions.create(model=model, messages=messages, tools=tools,
                                                      max_tokens=int(opts.get("max_tokens", 4096)),
                                                      timeout=left, **extra)
            except openai.APITimeoutError:
                status, error = "timeout", f"the API call ran past the step timeout ({request.timeout:g} s)"
                break
            except openai.APIError as exc:
                status, error = "error", f"chat-completions error: {type(exc).__name__}: {exc}"[:500]
                break
            a, b, c = _cost(resp.usage, opts)
            tin, tout, cost = tin + a, tout + b, cost + c
            if not resp.choices:
                status, error = "error", "the endpoint returned no choices"
                break
            msg = resp.choices[0].message
            if msg.content:
                text = msg.content
                log.write(f"[turn {turn + 1}] {text}\n")
            tool_calls = list(msg.tool_calls or [])
            entry: dict[str, Any] = {"role": "assistant", "content": msg.content or ""}
            if tool_calls:
                entry["tool_calls"] = [{"id": tc.id, "type": "function",
                                        "function": {"name": tc.function.name, "arguments": tc.function.arguments}}
                                       for tc in tool_calls]
            messages.append(entry)
            if not tool_calls:
                break
            for tc in tool_calls:
                calls += 1
                log.write(f"[turn {turn + 1}] tool {tc.function.name} {tc.function.arguments[:500]}\n")
                log.flush()
                args = _args(tc.function.arguments)
                out = args if isinstance(args, str) else box.call(tc.function.name, args)
                messages.append({"role": "tool", "tool_call_id": tc.id, "content": out})
        else:
            status, error = "error", f"the agent used all {max_turns} turns without finishing"
    return StepResult(status=status, message=summary_line(text, f"openai step {request.step}"), error=error,
                      input_tokens=tin, output_tokens=tout, cost_usd=cost, wall_s=time.monotonic() - started,
                      tool_calls=calls)


@hookimpl
def avo_supervise(backend: str, brief: SupervisorBrief) -> SupervisorAnswer:
    """One chat call without tools: the reviewer's answer is the redirect."""
    import openai

    client = _client(brief.base_url, brief.options)
    try:
        resp = client.chat.completions.create(
            model=_model(brief.model), timeout=brief.timeout,
            messages=[{"role": "system", "content": "You review a stalled evolutionary search and answer with "
                                                    "the redirect text only."},
                      {"role": "user", "content": brief.prompt}])
    except openai.APIError as exc:
        raise AvoError(f"the openai supervisor call failed: {type(exc).__name__}: {exc}") from None
    tin, tout, cost = _cost(resp.usage, brief.options)
    text = resp.choices[0].message.content if resp.choices else ""
    return SupervisorAnswer(redirect=text or "", input_tokens=tin, output_tokens=tout, cost_usd=cost)
