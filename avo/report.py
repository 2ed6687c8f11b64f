"""A run as one self-contained HTML page, for sharing.

The page holds the trajectory plot (base64 PNG, so it has no external files), the lineage
with per-config scores, each accepted version's message and diff, every rejected or failed
attempt with its error and archived diff, the supervisor's briefs and redirects, the
baselines and NOTES.md. Everything taken from the run is passed through ``html.escape``:
messages, diffs and notes are written by an agent and are untrusted text.
"""

from __future__ import annotations

import base64
import html
import io
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from avo.attempts import after_step
from avo.contract import gain
from avo.errors import AvoError
from avo.numbers import display_digits, fmt_pct
from avo.prompts import config_order
from avo.record_check import record_repairs
from avo.regular_files import read_text_of, write_json_atomic
from avo.state import read_trajectory

if TYPE_CHECKING:
    from avo.engine import Run

MAX_DIFF_CHARS = 200_000  # per diff; a generated file can make a diff enormous
MAX_TEXT_BYTES = 1 << 20  # of NOTES.md and of each supervisor file

SECTIONS = ("summary", "trajectory", "lineage", "versions", "attempts", "supervisor", "baselines", "notes")

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}
td.l,th.l{text-align:left}tr.best{background:#eef5ff}
pre{background:#f7f7f7;padding:.7em;overflow-x:auto;font-size:12px;white-space:pre-wrap}
.add{color:#116329}.del{color:#a40e26}.hunk{color:#0550ae}
.rejected{color:#7a5c00}.failed{color:#a40e26}.muted{color:#777}img{max-width:100%}
details{margin:.4em 0}summary{cursor:pointer}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _num(x: float | None, digits: int | None = None) -> str:
    from avo.numbers import fmt_number

    return fmt_number(x, digits)


def _diff_html(diff: str) -> str:
    """A unified diff as escaped, coloured ``<pre>`` text."""
    if not diff.strip():
        return '<p class="muted">(no changes outside avo\'s metadata)</p>'
    note = ""
    if len(diff) > MAX_DIFF_CHARS:
        note = f'<p class="muted">diff truncated to {MAX_DIFF_CHARS:,} of {len(diff):,} characters</p>'
        diff = diff[:MAX_DIFF_CHARS]
    lines = []
    for line in diff.splitlines():
        cls = ""
        if line.startswith("+") and not line.startswith("+++"):
            cls = "add"
        elif line.startswith("-") and not line.startswith("---"):
            cls = "del"
        elif line.startswith("@@"):
            cls = "hunk"
        lines.append(f'<span class="{cls}">{_e(line)}</span>' if cls else _e(line))
    return note + "<pre>" + "\n".join(lines) + "</pre>"


def _plot_img(run: Run) -> str:
    try:
        from avo.plot import build_figure

        fig = build_figure(run, attempts=True)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
    except ImportError:
        return '<p class="muted">matplotlib is not installed; no plot (pip install \'avo[plot]\').</p>'
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="trajectory of {_e(run.state.id)}" src="data:image/png;base64,{data}">'


def _summary(run: Run) -> str:
    s = run.state
    d = display_digits(s)
    best, seed = s.best_version, s.seed_version
    g = gain(best.scalar, seed.scalar, s.target.direction)
    matches = sum(1 for v in s.versions[1:] if not v.new_best)
    rows = [
        ("target", f"{s.target.name} — {s.target.description}"),
        ("run", s.id),
        ("started", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.created))),
        ("direction", s.target.direction),
        ("best", f"v{best.n} = {_num(best.scalar, d)} ({fmt_pct(g)} over x_0 = {_num(seed.scalar, d)})"),
        ("committed versions", f"{len(s.versions)}" + (f" ({matches} of them matches, not new bests)"
                                                      if matches else "")),
        ("steps", f"{s.steps}" + (f" of {s.options.max_steps}" if s.options.max_steps else "")),
        ("evaluations", str(s.evaluations)),
        ("quick mode", "yes" if s.options.quick else "no"),
        ("executor", s.options.executor + "".join(f", {k}={v}" for k, v in sorted(s.options.executor_options.items()))),
    ]
    if s.origin:
        rows.append(("seeded from", s.origin))
    if s.usage:
        rows.append(("usage", ", ".join(f"{k}={v:g}" for k, v in sorted(s.usage.items()))))
    body = "".join(f'<tr><th class="l">{_e(k)}</th><td class="l">{_e(v)}</td></tr>' for k, v in rows)
    goal = f"<h3>goal</h3><pre>{_e(s.target.goal)}</pre>" if s.target.goal.strip() else ""
    return f'<section id="summary"><h2>Summary</h2><table>{body}</table>{goal}</section>'


def _measured_on(rec: dict[str, Any]) -> str:
    """The executor and node of a record, and the CPU class it ran on (recorded since avo records it)."""
    cpu = rec.get("cpu")
    return str(rec.get("where") or "") + (f", CPU {cpu}" if isinstance(cpu, str) and cpu else "")


def _lineage(run: Run) -> str:
    s = run.state
    d = display_digits(s)
    configs = config_order(s) if s.configs else list(s.seed_version.metrics)  # the evaluator's order
    head = "".join(f"<th>{_e(c)}</th>" for c in configs)
    # Where each version was measured: its submit (or the seed's) record in the trajectory.
    where = {int(r.get("step") or 0): _measured_on(r) for r in read_trajectory(run.paths)
             if r.get("kind") == "submit" or r.get("id") == "seed"}
    rows = []
    prev = None
    for v in s.versions:
        d_prev = "" if prev is None else fmt_pct(gain(v.scalar, prev.scalar, s.target.direction))
        if v.n > 0 and not v.new_best:
            d_prev += " match"
        d_seed = fmt_pct(gain(v.scalar, s.seed_version.scalar, s.target.direction))
        cells = "".join(f"<td>{_e(_num(v.metrics.get(c), d))}</td>" for c in configs)
        cls = ' class="best"' if v.new_best else ""
        star = " ★" if v.n == s.best else ""
        rows.append(f'<tr{cls}><td class="l"><a href="#v{v.n}">v{v.n}</a>{star}</td><td>{v.step}</td>'
                    f"<td>{_e(_num(v.scalar, d))}</td><td>{_e(d_prev)}</td><td>{_e(d_seed)}</td>{cells}"
                    f'<td class="l">{_e(v.message)}</td><td class="l">{_e(where.get(v.step, ""))}</td></tr>')
        prev = v
    return (f'<section id="lineage"><h2>Lineage</h2><table><tr><th class="l">version</th><th>step</th>'
            f'<th>scalar</th><th>Δ prev</th><th>Δ x_0</th>{head}<th class="l">message</th>'
            '<th class="l">measured on</th></tr>' + "".join(rows)
            + '</table><p class="muted">★ the best version; highlighted rows are new bests; '
            '"match": accepted without a new best.</p></section>')


def _versions(run: Run) -> str:
    s = run.state
    lineage = run.lineage
    parts = ['<section id="versions"><h2>Accepted versions</h2>']
    d = display_digits(s)
    for i, v in enumerate(s.versions):
        kind = "seed" if i == 0 else ("new best" if v.new_best else "match, not a new best")
        parts.append(f'<h3 id="v{v.n}">v{v.n} ({_e(kind)}): scalar {_e(_num(v.scalar, d))}</h3>'
                     f"<p>{_e(v.message)}</p>")
        if v.notes:
            parts.append(f'<p class="muted">evaluator notes: {_e(v.notes)}</p>')
        if i == 0:
            continue
        try:
            diff = lineage.diff(s.versions[i - 1].sha, v.sha)
        except AvoError as exc:
            parts.append(f'<p class="failed">diff unavailable: {_e(exc)}</p>')
            continue
        parts.append(f"<details><summary>diff v{s.versions[i - 1].n} → v{v.n}</summary>{_diff_html(diff)}</details>")
    parts.append("</section>")
    return "".join(parts)


def _archived(run: Run, rel: Any) -> str:
    if not rel:
        return '<p class="muted">(no archived diff)</p>'
    name = Path(str(rel))
    # Only a file directly in rejected/ (a record line names it: the agent can write one).
    text = read_text_of(run.paths.root / name, 4 * MAX_DIFF_CHARS) \
        if name.parent == Path("rejected") and name.name not in ("", ".", "..") else None
    if text is None:
        return f'<p class="muted">archived diff {_e(rel)} is missing</p>'
    diff = _diff_html(text)
    return f"<details><summary>archived diff {_e(rel)}</summary>{diff}</details>"


def _attempts(run: Run, records: list[dict[str, Any]]) -> str:
    parts = ['<section id="attempts"><h2>Rejected, failed, interrupted, reverted and aborted attempts</h2>']
    d = display_digits(run.state)
    shown = 0
    for rec in records:
        kind = rec.get("kind")
        if kind == "submit" and rec.get("outcome") in ("rejected", "failed", "interrupted"):
            outcome = str(rec["outcome"])
            score = "" if rec.get("scalar") is None else f" — scalar {_num(rec['scalar'], d)}"
            parts.append(f'<h3 class="{_e(outcome)}">step {_e(rec.get("step"))} {_e(outcome)}{_e(score)}</h3>'
                         f"<p>{_e(rec.get('message'))}</p>")
            if rec.get("reason"):
                parts.append(f"<p>reason: {_e(rec['reason'])}</p>")
            if rec.get("where"):
                parts.append(f'<p class="muted">measured on {_e(_measured_on(rec))}</p>')
            if rec.get("error") and rec.get("error") != rec.get("reason"):
                parts.append(f'<pre class="failed">{_e(rec["error"])}</pre>')
            parts.append(_draws_line(rec, d, "measured before it was interrupted"))
            parts.append(_archived(run, rec.get("diff")))
            shown += 1
        elif kind == "revert" and rec.get("diff"):
            parts.append(f'<h3 class="muted">reverted {_e(after_step(rec))} (not submitted, no step used)</h3>')
            if rec.get("message"):
                parts.append(f"<p>{_e(rec['message'])}</p>")
            parts.append(_archived(run, rec.get("diff")))
            shown += 1
        elif kind == "aborted":
            parts.append(_aborted(run, rec, d))
            shown += 1
    if not shown:
        parts.append('<p class="muted">none: every submit entered the lineage.</p>')
    parts.append("</section>")
    return "".join(parts)


def _aborted(run: Run, rec: dict[str, Any], digits: int | None) -> str:
    """A submit aborted before its decision (its evaluation refused): the draws it had."""
    parts = [f'<h3 class="failed">submit aborted {_e(after_step(rec))} (not decided, no step used)</h3>'
             f"<p>{_e(rec.get('message'))}</p>"]
    if rec.get("error"):
        parts.append(f'<pre class="failed">{_e(rec["error"])}</pre>')
    parts.append(_draws_line(rec, digits, "measured before it was aborted"))
    parts.append(_archived(run, rec.get("diff")))
    return "".join(parts)


def _draws_line(rec: dict[str, Any], digits: int | None, said: str) -> str:
    """The draws a submit that ended before its decision had (its record's ``draws``), or nothing."""
    draws = rec.get("draws")
    measured = [x for x in draws if isinstance(x, dict) and isinstance(x.get("scalar"), (int, float))] \
        if isinstance(draws, list) else []
    if not measured:
        return ""
    return f'<p class="muted">{_e(said)}: ' + _e(", ".join(
        f"{x.get('label')} {_num(x['scalar'], digits)}" for x in measured)) + "</p>"


def _supervisor(run: Run) -> str:
    parts = ['<section id="supervisor"><h2>Supervisor</h2>']
    folder = run.paths.supervisor
    files = sorted(folder.glob("*.md")) if folder.is_dir() and not folder.is_symlink() else []
    if not files:
        parts.append('<p class="muted">the supervisor was never called.</p>')
    for f in files:
        kind = "redirect" if f.name.startswith("redirect") else "brief"
        parts.append(f"<details{' open' if kind == 'redirect' else ''}><summary>{_e(kind)}: {_e(f.name)}</summary>"
                     f"<pre>{_e(read_text_of(f, MAX_TEXT_BYTES) or '')}</pre></details>")
    parts.append("</section>")
    return "".join(parts)


def _baselines(run: Run) -> str:
    s = run.state
    if not s.baselines:
        return '<section id="baselines"><h2>Baselines</h2><p class="muted">none declared.</p></section>'
    d = display_digits(s)
    rows = "".join(
        f'<tr><td class="l">{_e(b.name)}</td><td>{_e(_num(b.scalar, d))}</td>'
        f'<td class="l">{_e("ok" if b.correct else b.error)}</td></tr>'
        for b in s.baselines
    )
    return (f'<section id="baselines"><h2>Baselines</h2><table><tr><th class="l">baseline</th><th>scalar</th>'
            f'<th class="l">status</th></tr>{rows}</table></section>')


def _repairs(records: list[dict[str, Any]]) -> str:
    """Every repair of the record by `avo recover` (none: no section)."""
    reps = record_repairs(records)
    if not reps:
        return ""
    items = "".join(f"<li>after step {_e(r['step'])}: {_e(r['set_aside'])} line(s) set aside, {_e(r['gaps'])} "
                    "place(s) where lines were deleted"
                    + ("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in r["notes"]) + "</ul>" if r["notes"] else "")
                    + "</li>" for r in reps)
    return ('<section id="repairs"><h2>Record repairs</h2><p>The record was edited by hand and repaired by '
            f"<code>avo recover</code> {len(reps)} time(s); what each repair set aside and changed:</p>"
            f"<ul>{items}</ul></section>")


def _notes(run: Run) -> str:
    text = read_text_of(run.paths.notes, MAX_TEXT_BYTES) or "(no NOTES.md)"
    return f'<section id="notes"><h2>NOTES.md</h2><pre>{_e(text)}</pre></section>'


def build_report(run: Run, *, plot: bool = True) -> str:
    """The whole HTML page for ``run`` as a string (sections have the ids in ``SECTIONS``)."""
    records = read_trajectory(run.paths)
    figure = _plot_img(run) if plot else '<p class="muted">(plot left out)</p>'
    body = [
        f"<h1>avo run {_e(run.state.id)}</h1>",
        _summary(run),
        _repairs(records),
        f'<section id="trajectory"><h2>Trajectory</h2>{figure}<p class="muted">Step line: running best over '
        "committed versions; circles: new bests; dashed: baselines; hollow orange triangles: rejected attempts; "
        "red crosses: failed attempts. The small panels below: each config relative to x_0.</p></section>",
        _lineage(run),
        _versions(run),
        _attempts(run, records),
        _supervisor(run),
        _baselines(run),
        _notes(run),
    ]
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>avo report: {_e(run.state.id)}'
            f"</title><style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_report(run: Run, output: Path, *, plot: bool = True) -> Path:
    """Write :func:`build_report` to ``output`` (an ``.html`` file)."""
    output = Path(output)
    if output.suffix.lower() not in (".html", ".htm"):
        raise AvoError(f"cannot write a report to {output}: the file must end in .html")
    if not output.parent.is_dir():
        raise AvoError(f"cannot write a report to {output}: the folder {output.parent} does not exist "
                       "(create it first, or pick another --output)")
    write_json_atomic(output, build_report(run, plot=plot), sync="none")  # renamed in: a link at the name is replaced
    return output
