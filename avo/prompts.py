"""The variation prompt and the supervisor brief: the whole framework/agent interface.

Readable by a human, compact for an agent: the lineage as a table with per-config scores,
the last rejected attempts with their errors, the rules, and where everything lives. Full
logs never go in here; they stay in ``logs/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from avo.attempts import after_step
from avo.contract import gain
from avo.numbers import display_digits, fmt_number, fmt_pct
from avo.policy import fmt_tolerance
from avo.state import RunState, Version, read_trajectory, recent_records

if TYPE_CHECKING:
    from avo.engine import Run

MAX_CONFIG_COLUMNS = 8
MAX_LINEAGE_ROWS = 12
LOG_ROWS = 50  # `avo log` without --all: v0 and the newest 49
MAX_REJECTED = 5
MAX_NOTES_BYTES = 1 << 20
MAX_NOTES_LINES = 60


def _trim(text: str | None, limit: int = 300) -> str:
    if not text:
        return ""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cell(text: str | None, limit: int) -> str:
    """Text for a markdown table cell: trimmed, and a ``|`` cannot open a new column."""
    return _trim(text, limit).replace("|", "\\|")


def config_order(state: RunState) -> list[str]:
    """The configs in the evaluator's own order (as x_0 reported them), not run.json's sorted one.

    The evaluator's notes and the submit summary list configs in that order; sorted names put
    n1024 before n256, so the lineage table read differently from everything next to it.
    """
    order = [c for c in state.seed_version.metrics if c in state.configs]
    return order + [c for c in state.configs if c not in order]


def _noise_rule(state: RunState) -> str:
    """What the policy does with the target's measurement noise (nothing without a band)."""
    noise, best = state.options.noise, state.best_version.n
    if noise.band <= 0:
        return ""
    again = ("\n   A gain beyond the band is measured a second time and recorded at the lower draw."
             if noise.recheck_gains else "")
    return (f"\n   One measurement varies by about ±{noise.band:.0%} here: a gain inside that band is"
            f"\n   re-measured {noise.confirm_runs}× beside v{best}, interleaved, and must show on the medians.{again}")


def lineage_table(state: RunState, rows: int = MAX_LINEAGE_ROWS) -> str:
    """Markdown table of accepted versions with per-config scores and deltas.

    Digits follow :func:`avo.numbers.display_digits`, so a small real gain never shows as
    ``+0%``; a version accepted as a match (no new best) says ``match`` in its Δ column.
    """
    configs = config_order(state)[:MAX_CONFIG_COLUMNS]
    versions = state.versions
    digits = display_digits(state)
    shown: list[Version] = versions if len(versions) <= rows else [versions[0], *versions[-(rows - 1):]]
    head = ["ver", "scalar", "Δ prev", *configs, "message"]
    lines = []
    hidden = versions[1:len(versions) - len(shown) + 1]
    if hidden:  # bounded: v0 and the newest, the rest summarised in one line
        bests = sum(1 for v in hidden if v.new_best)
        lines.append(f"(v{hidden[0].n}–v{hidden[-1].n} not shown: {len(hidden)} versions, {bests} of them new "
                     "bests; `avo log --all` lists every version)")
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    prev: Version | None = None
    for v in shown:
        direction = state.target.direction
        delta = "" if prev is None else fmt_pct(gain(v.scalar, prev.scalar, direction))
        if v.n > 0 and not v.new_best:
            delta += " match"
        mark = " ★" if v.n == state.best else ""
        per_config = []
        for c in configs:
            value, before = v.metrics.get(c), prev.metrics.get(c) if prev else None
            moved = f" ({fmt_pct(gain(value, before, direction), 0)})" if value is not None and before else ""
            per_config.append(fmt_number(value, digits) + moved)
        cells = [f"v{v.n}{mark}", fmt_number(v.scalar, digits), delta.strip(), *per_config, _cell(v.message, 70)]
        lines.append("| " + " | ".join(cells) + " |")
        prev = v
    if len(state.configs) > MAX_CONFIG_COLUMNS:
        lines.append(f"({len(state.configs) - MAX_CONFIG_COLUMNS} more configs in .avo/scores.jsonl)")
    return "\n".join(lines)


def _kb_index(run: Run) -> str:
    entries = []
    for path in sorted(run.paths.kb.rglob("*")):
        if not path.is_file():
            continue
        title = ""
        if path.suffix in (".md", ".txt", ".rst"):
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.strip():
                    title = line.strip().lstrip("#").strip()
                    break
        entries.append(f"- kb/{path.relative_to(run.paths.kb).as_posix()}" + (f" — {title}" if title else ""))
    return "\n".join(entries) or "(empty)"


# Every line _is_attempt keeps holds one of these as avo writes it (json.dumps: `": "`); an
# accepted submit holds none, so a run without rejections is not parsed line by line.
ATTEMPT_NEEDLES = (b'"outcome": "rejected"', b'"outcome": "failed"', b'"outcome": "interrupted"', b'"revert"',
                   b'"aborted"')


def _is_attempt(r: dict[str, Any]) -> bool:
    """An attempt that did not become a version: a rejected, failed or interrupted submit, a
    revert with changes, a submit aborted before its decision (recorded so until 2026-12-06)."""
    return bool((r.get("kind") == "submit" and r.get("outcome") != "accepted")
                or (r.get("kind") == "revert" and r.get("diff")) or r.get("kind") == "aborted")


def _rejected(records: list[dict[str, Any]], limit: int = MAX_REJECTED, digits: int | None = None) -> str:
    rows = [r for r in records if _is_attempt(r)][-limit:]
    if not rows:
        return "(none yet)"
    out = []
    for r in rows:
        if r.get("kind") == "revert":
            out.append(f"- reverted {after_step(r)} (not submitted, no step used): "
                       f"{_trim(r.get('message'), 100) or '(no message)'} (diff: {r['diff']})")
            continue
        if r.get("kind") == "aborted":
            out.append(f"- submit aborted {after_step(r)} (not decided, no step used): {_trim(r.get('message'), 100)}"
                       f" → error: {_trim(r.get('error'), 240)}")
            continue
        what = f"error: {_trim(r.get('error'), 240)}" if r.get("outcome") in ("failed", "interrupted") else (
            f"scalar {fmt_number(r.get('scalar'), digits)} — {_trim(r.get('reason'), 120)}")
        out.append(f"- step {r['step']} {r['outcome']}: {_trim(r.get('message'), 100)} → {what}"
                   + (f" (diff: {r['diff']})" if r.get("diff") else ""))
    return "\n".join(out)


def _baselines(state: RunState) -> str:
    if not state.baselines:
        return ""
    digits = display_digits(state)
    rows = [
        f"- {b.name}: {fmt_number(b.scalar, digits) if b.correct else 'failed: ' + _trim(b.error, 80)}"
        for b in state.baselines
    ]
    return "## Baselines (measured at start)\n" + "\n".join(rows) + "\n\n"


def _notes(run: Run) -> str:
    from avo.regular_files import read_text_of

    text = read_text_of(run.paths.notes, MAX_NOTES_BYTES)  # the agent's file: a pipe or bad UTF-8 stalled every prompt
    if text is None:
        return "(missing)"
    lines = text.splitlines()
    if len(lines) > MAX_NOTES_LINES:
        return "\n".join(lines[:MAX_NOTES_LINES]) + f"\n… ({len(lines) - MAX_NOTES_LINES} more lines in NOTES.md)"
    return "\n".join(lines)


def _migrants(run: Run, digits: int | None) -> str:
    """What arrived from other islands since this island's agent last stepped, and where to look."""
    from avo.colony import colony_of
    from avo.evolve import STEP_KINDS
    from avo.migration import arrivals

    colony = colony_of(run.paths)
    if colony is None:
        return ""
    # Read back from the end: the last few migrants and the step before them are all it needs.
    records = recent_records(run.paths, tuple(f'"{k}"'.encode() for k in STEP_KINDS),
                             lambda r: r.get("kind") in STEP_KINDS, 4)
    came = arrivals(records)
    if not came:
        return ""
    rows = []
    for r in came:
        m = r["migrant"]
        donor = colony / str(m.get("island"))
        verdict = (f"accepted as v{r.get('version')}" if r.get("outcome") == "accepted"
                   else f"{r.get('outcome')}: {_trim(str(r.get('reason') or r.get('error') or ''), 160)}")
        score = fmt_number(r["scalar"], digits) if r.get("scalar") is not None else "no score"
        rows.append(f"- step {r.get('step')}: {m.get('island')}'s v{m.get('version')} arrived; here it scored "
                    f"{score}, {verdict}. Its lineage, read-only: "
                    f"`git --git-dir {donor}/.avo/lineage.git log --stat`, `avo log --run {donor}`")
    return ("## Migrants from other islands of the colony\n"
            "Since your last step the colony offered this island another island's best version; "
            "avo evaluated it here like any candidate.\n" + "\n".join(rows) + "\n\n")


def variation_prompt(run: Run) -> str:
    """The prompt for the next variation step (DESIGN §6 step 1)."""
    state, paths = run.state, run.paths
    spec = state.target
    best = state.best_version
    step = state.steps + 1
    budget = f"step {step} of {state.options.max_steps}" if state.options.max_steps else f"step {step}"
    # Only the last few attempts are shown: read back from the end, not the whole trajectory.
    records = recent_records(paths, ATTEMPT_NEEDLES, _is_attempt, MAX_REJECTED)
    redirect = ""
    if state.supervisor.pending_redirect:
        redirect = (
            "## Supervisor redirect — a strong prior for this step\n"
            "A review of the whole trajectory suggested these directions. Pick one (or more) and "
            "pursue it seriously before returning to your previous line of attack.\n\n"
            f"{state.supervisor.pending_redirect}\n\n"
        )
    seed = state.seed_version
    digits = display_digits(state)
    over_seed = gain(best.scalar, seed.scalar, spec.direction)
    seed_text = fmt_number(seed.scalar, digits)
    quick = (f"\n  `{paths.avo_eval} --quick` screens in the target's cheap mode (not comparable with the lineage)"
             if spec.has_quick and not state.options.quick else "")
    sense = "higher is better" if spec.direction == "maximize" else "lower is better"
    history = (f"`git diff v0 v{best.n}` (the lineage so far), `git diff v{best.n}` (your uncommitted edits)"
               if best.n else "`git diff v0` (your uncommitted edits)")
    return f"""# avo — {budget} — target `{spec.name}` (run {state.id})

## Goal
{spec.goal.strip() or spec.description}

Best so far: **v{best.n} = {fmt_number(best.scalar, digits)}** ({fmt_pct(over_seed)} over x_0 = {seed_text}; {sense}).
The scalar is the geometric mean of the per-config metrics unless the target gives one.

{redirect}{_migrants(run, digits)}## Where things are
- candidate x_t: `{paths.work}/` — the evolved file is `{spec.entrypoint}`; edit only inside work/
- knowledge base K (read-only): `{paths.kb}/`
- evaluate f at will: `{paths.avo_eval}` (short summary; full logs in `{paths.logs}/`){quick}
- submit when done: `avo submit --run {paths.root} -m "what changed and why"` (avo adds the `vN:` tag itself)
- scratch memory that survives every reset: `{paths.notes}`
- lineage P_t is git history in work/: `git log --oneline`, `git show v{best.n}:{spec.entrypoint}`,
  {history}
- diffs of rejected and failed attempts: `{paths.rejected}/` (to build on one: `git -C work apply <diff>`)

## Rules
1. Edit only files in work/. Never modify the evaluator, kb/, run.json or the trajectory; a
   changed evaluator stops the run.
2. avo scores the candidate itself on submit; a score you report is never used. A candidate
   is committed only if it passes the correctness gate and matches or beats v{best.n}.
   Otherwise its diff is archived in rejected/ and work/ is reset to v{best.n}. Scores within a
   relative {fmt_tolerance(spec.tie_tolerance)} of the best are a tie: a match, not a new best. A match is worth
   submitting only when it is simpler or faster than v{best.n}; otherwise `avo revert -m "why"`.{_noise_rule(state)}
3. Simplicity criterion: all else equal, simpler is better. A tiny gain that adds ugly
   complexity is not worth it; removing code for an equal score is a win.
4. Keep output out of your context: avo-eval prints a summary; read the logs only when an
   evaluation fails and you need the details.
5. Write what you tried and learned in NOTES.md before you submit; it survives resets.
   A reset removes untracked files in work/ (helper scripts too): submit the ones worth keeping
   with a candidate, or list them in a committed work/.gitignore.

## Lineage (★ = best; "match" = accepted without a new best)
{lineage_table(state)}

{_baselines(state)}## Recent rejected or failed attempts
{_rejected(records, digits=digits)}

## Knowledge base
{_kb_index(run)}

## NOTES.md
{_notes(run)}
"""


MAX_SCREENING = 12


def _screening(records: list[dict[str, Any]], digits: int | None = None) -> str:
    """The agent's own measurements: often the best evidence of what was tried and why it stalled."""
    evals = [r for r in records if r.get("kind") == "eval" and r.get("id") != "seed"][-MAX_SCREENING:]
    if not evals:
        return "(none)"
    rows = ["| eval | during step | scalar | vs best | error |", "|---|---|---|---|---|"]
    for r in evals:
        g = r.get("gain_vs_best")
        rows.append(f"| {r.get('id')} | {r.get('step')} | {fmt_number(r.get('scalar'), digits)} | "
                    f"{'' if g is None else fmt_pct(g)} | {_cell(r.get('error'), 80)} |")
    return "\n".join(rows)


def supervisor_brief(run: Run) -> str:
    """The review prompt for a stalled run: whole trajectory, per-config trends, the ask."""
    state = run.state
    spec = state.target
    records = read_trajectory(run.paths)
    digits = display_digits(state)
    steps = [r for r in records if r.get("kind") == "submit" or _is_attempt(r)]
    rows = ["| step | outcome | scalar | vs best before | message | error |", "|---|---|---|---|---|---|"]
    for r in steps:
        if r.get("kind") == "revert":
            rows.append(f"| {after_step(r)} | reverted | — | not submitted, no step used "
                        f"({_cell(r.get('diff'), 80)}) | {_cell(r.get('message'), 70)} |  |")
            continue
        if r.get("kind") == "aborted":
            rows.append(f"| {after_step(r)} | aborted | — | not decided, no step used | "
                        f"{_cell(r.get('message'), 70)} | {_cell(r.get('error'), 80)} |")
            continue
        outcome = r["outcome"] + (" (match)" if r["outcome"] == "accepted" and r.get("new_best") is False else "")
        rows.append(
            f"| {r['step']} | {outcome} | {fmt_number(r.get('scalar'), digits)} | {_cell(r.get('reason'), 120)} | "
            f"{_cell(r.get('message'), 70)} | {_cell(r.get('error'), 80)} |"
        )
    trend = ["| config | x_0 | best | trajectory over accepted versions |", "|---|---|---|---|"]
    best = state.best_version
    for c in config_order(state):
        series = " → ".join(fmt_number(v.metrics.get(c), digits) for v in state.versions[-8:])
        first, top = fmt_number(state.seed_version.metrics.get(c), digits), fmt_number(best.metrics.get(c), digits)
        trend.append(f"| {c} | {first} | {top} | {series} |")
    return f"""# Supervisor review — run {state.id}, target `{spec.name}`

You are the supervisor of an evolutionary search whose variation operator is a coding agent.
The search stopped because: **{state.supervisor.reason or 'a review was requested'}**.
Review the whole trajectory below, then redirect it. You are reviewing, not editing: do not
change work/.

## Goal of the target
{spec.goal.strip() or spec.description}

## Lineage
{lineage_table(state, rows=20)}

## Every step so far
{chr(10).join(rows)}

## Evaluations between submits (avo-eval), the last {MAX_SCREENING}
{_screening(records, digits)}

## Per-config trends
{chr(10).join(trend)}

{_baselines(state)}Rejected diffs are in `{run.paths.rejected}/`; the agent's notes are in `{run.paths.notes}`.

## Your task
1. Say in two or three sentences why the search stalled (what it kept trying, what the
   per-config numbers say about where the time or the score goes).
2. Propose 3–5 **concrete, distinct** optimisation directions that the trajectory has not
   explored yet, each with the first change to make and how to tell whether it worked.
   Prefer directions that change the algorithm or the cost model over more tuning.
3. Store your answer: `avo supervisor record --run {run.paths.root} -f answer.md` (or pass the
   text). It is injected into the next variation prompt as a strong prior.
"""
