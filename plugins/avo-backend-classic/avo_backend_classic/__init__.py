"""avo backend ``classic``: the non-agentic operator the paper compares against.

``Vary(P_t) = Generate(Sample(P_t))``: *Sample* picks a parent among the accepted versions
by tournament on their scalars; *Generate* mutates numeric literals of the target's
entrypoint (found with :mod:`tokenize` in Python files, a regular expression otherwise).
A hill climber with a fixed RNG seed (``StepRequest.seed``, else the step number): no
model, no key, no cost. After a supervisor redirect it widens its mutations for one step.
"""

from __future__ import annotations

import io
import math
import random
import re
import subprocess
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path

from avo import hookimpl
from avo.models import BackendInfo, StepRequest, StepResult, SupervisorAnswer, SupervisorBrief
from avo.state import RunPaths, Version, load_state

NAME = "classic"
TOURNAMENT = 3
SIGMA = 0.25  # relative step of a mutation (log-normal), widened after a redirect
WIDEN = 4.0
REDIRECT_MARK = "## Supervisor redirect"
_NUMBER = re.compile(r"(?<![\w.])(\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)(?![\w.])")


@dataclass(frozen=True)
class Literal:
    """A numeric literal in the source: where it is and its text."""

    start: int  # character offset
    end: int
    text: str

    @property
    def is_int(self) -> bool:
        return re.fullmatch(r"\d+", self.text) is not None


@hookimpl
def avo_backends() -> list[BackendInfo]:
    """Always available: it needs nothing."""
    return [BackendInfo(name=NAME, description="classical evolution: tournament sampling + numeric-literal "
                                               "mutation (no model, no cost; the paper's baseline operator)",
                        needs=[], available=True)]


def python_literals(source: str) -> list[Literal]:
    """Numeric literals of Python source via :mod:`tokenize` (complex/hex literals skipped)."""
    offsets = [0]
    for line in source.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    out = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return regex_literals(source)
    for tok in tokens:
        if tok.type != tokenize.NUMBER:
            continue
        text = tok.string.replace("_", "")
        if text[-1:] in "jJ" or text[:2].lower() in ("0x", "0o", "0b"):
            continue
        start = offsets[tok.start[0] - 1] + tok.start[1]
        end = offsets[tok.end[0] - 1] + tok.end[1]
        out.append(Literal(start, end, tok.string))
    return out


def regex_literals(source: str) -> list[Literal]:
    """Numeric literals of any other language (C, C++, JS...) by a conservative regex."""
    return [Literal(m.start(1), m.end(1), m.group(1)) for m in _NUMBER.finditer(source)]


def mutate_value(lit: Literal, rng: random.Random, sigma: float) -> str:
    """A new literal near the old one: log-normal for non-zero values, ±1-ish for ints."""
    value = float(lit.text.replace("_", ""))
    if lit.is_int:
        step = max(1, int(round(abs(value) * sigma * abs(rng.gauss(0, 1)))))
        new = int(value) + rng.choice((-1, 1)) * step
        return str(max(0, new))  # a literal has no sign; keep it a valid token
    if value == 0.0:
        new_f = abs(rng.gauss(0, sigma))
    else:
        new_f = value * math.exp(rng.gauss(0, sigma))
    return f"{new_f:.6g}" if ("e" in f"{new_f:.6g}" or "." in f"{new_f:.6g}") else f"{new_f:.6g}.0"


def mutate_source(source: str, python: bool, rng: random.Random, sigma: float, count: int) -> tuple[str, list[str]]:
    """Mutate ``count`` random literals; return the new source and what changed."""
    lits = python_literals(source) if python else regex_literals(source)
    if not lits:
        return source, []
    picked = sorted(rng.sample(lits, min(count, len(lits))), key=lambda x: x.start, reverse=True)
    changes = []
    for lit in picked:
        new = mutate_value(lit, rng, sigma)
        line = source.count("\n", 0, lit.start) + 1
        changes.append(f"L{line} {lit.text}→{new}")
        source = source[:lit.start] + new + source[lit.end:]
    return source, list(reversed(changes))


def tournament(versions: list[Version], direction: str, rng: random.Random, k: int = TOURNAMENT) -> Version:
    """Sample k accepted versions, keep the best (ties go to the later version)."""
    pool = [rng.choice(versions) for _ in range(min(k, len(versions)))]
    key = (lambda v: (v.scalar, v.n)) if direction == "maximize" else (lambda v: (-v.scalar, v.n))
    return max(pool, key=key)


def _show(work: Path, sha: str, path: str) -> str:
    return subprocess.run(["git", "show", f"{sha}:{path}"], cwd=work, capture_output=True, text=True,
                          check=True).stdout


@hookimpl
def avo_agent_step(backend: str, request: StepRequest) -> StepResult:
    """One classical variation: tournament-select a parent, mutate its literals into work/."""
    started = time.monotonic()
    state = load_state(RunPaths(request.run_dir))
    rng = random.Random(request.seed if request.seed is not None else request.step)
    widened = REDIRECT_MARK in request.prompt
    sigma = SIGMA * (WIDEN if widened else 1.0)
    count = 1 + (rng.random() < 0.3) + (2 if widened else 0)
    parent = tournament(state.versions, state.target.direction, rng)
    entry = state.target.entrypoint
    try:
        source = _show(request.work_dir, parent.sha, entry)
    except subprocess.CalledProcessError as exc:
        return StepResult(status="error", error=f"cannot read {entry} of v{parent.n}: {exc.stderr.strip()}",
                          wall_s=time.monotonic() - started)
    new, changes = mutate_source(source, entry.endswith(".py"), rng, sigma, count)
    log = request.log_path
    log.parent.mkdir(parents=True, exist_ok=True)
    if not changes:
        log.write_text(f"no numeric literal in {entry}; nothing to mutate\n")
        return StepResult(status="ok", message=f"classic: no numeric literal in {entry}",
                          wall_s=time.monotonic() - started)
    (request.work_dir / entry).write_text(new)
    message = f"classic: parent v{parent.n}{' (widened)' if widened else ''}, " + ", ".join(changes)
    log.write_text(f"seed {request.seed} parent v{parent.n} sigma {sigma}\n{message}\n")
    return StepResult(status="ok", message=message[:300], wall_s=time.monotonic() - started)


@hookimpl
def avo_supervise(backend: str, brief: SupervisorBrief) -> SupervisorAnswer:
    """The classical operator's answer to a stall: widen the mutations for one step."""
    return SupervisorAnswer(redirect=(
        "classic operator redirect (no model): the last steps found no new best, so the next step "
        f"mutates up to 3 more literals with {WIDEN:g}x wider steps, to escape the local optimum.\n"
        f"(stall reason: {brief.reason})"))
