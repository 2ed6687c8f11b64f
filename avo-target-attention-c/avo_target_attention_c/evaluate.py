"""One evaluation: build, gate against float64, then time against NumPy/BLAS, interleaved.

Runs inside avo's trusted evaluator child, which holds the inputs' secret, the references,
the expected outputs and the clock. The candidate is compiled and run only inside the
sandbox (:mod:`avo_target_attention_c.sandbox`), which sees inputs and returns outputs
through shared memory and is timed from here.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from avo.contract import failed, geometric_mean
from avo.eval_inputs import derived_seed
from avo.models import EvalOptions, EvalResult

from avo_target_attention_c.build import PROTOTYPE, SERVE_PROTOTYPE, SYMBOL, BuildError, compile_kernel, compile_serve
from avo_target_attention_c.contention import FOREIGN_MAX, Tally, usage
from avo_target_attention_c.roofline import BF16_PER_FLOAT, Probe, roof_note
from avo_target_attention_c.sandbox import SandboxFailure, Worker, choose_cpus
from avo_target_attention_c.settings import ATOL, RTOL, D, Plan, plan


class GateFailure(Exception):
    """The candidate computed something wrong; the message says what and where."""


class TooBusyToTime(Exception):
    """The wall clock moved too much to time anything (more than one thread per side)."""


class Implausible(Exception):
    """A config was measured doing more useful work per second than the machine can compute."""


# Useful flops per second over this many times the FMA probe's rate beside the same calls is
# not a fast kernel but a broken measurement (work done off the clock, a kernel answering
# requests itself with less plumbing than the empty call subtracted): every useful flop of
# attention is half of an FMA, and the probe runs the widest FMA the compiler has, on every pipe.
# The margin covers the probe's own noise (its median beside the calls moves a few percent).
# A CPU with a matrix engine the kernel can use computes float32-accurate work faster than
# its FMAs (bf16 parts, BF16_PER_FLOAT products each): there the bound is that rate's.
MAX_ROOF = 1.2


def beyond_roof(key: str, gflops: float, roof: float | None, quick: bool, matrix: float | None = None) -> str | None:
    """Why ``key`` cannot be scored at ``gflops`` against the probe's ``roof``, or ``None``.

    ``matrix``: the matrix engine's bf16 peak (GFLOP/s, all threads) where the kernel can use
    one; the bound is then MAX_ROOF times the faster of the FMA roof and the engine's
    float32-accurate rate. Quick mode's configs take microseconds, most of them the empty call
    subtracted, so their rates are not held against the roof.
    """
    if quick or roof is None or roof <= 0:
        return None
    engine = matrix / BF16_PER_FLOAT if matrix else 0.0
    if gflops <= MAX_ROOF * max(roof, engine):
        return None
    if engine > roof:
        return (f"{key} measured {gflops:.0f} GFLOP/s of useful work, {gflops / engine:.2f}x the matrix engine's "
                f"float32-accurate rate ({engine:.0f} GFLOP/s: its bf16 peak / {BF16_PER_FLOAT}; over "
                f"{MAX_ROOF:g}x is refused)")
    return (f"{key} measured {gflops:.0f} GFLOP/s of useful work, {gflops / roof:.2f}x the FMA roofline measured "
            f"beside its calls ({roof:.0f} GFLOP/s; over {MAX_ROOF:g}x is refused)")


def log(msg: str) -> None:
    """Progress and full diagnostics go to stderr, which avo keeps in the evaluation log."""
    print(f"[attention_c] {msg}", file=sys.stderr, flush=True)


def _save_log(options: EvalOptions, name: str, text: str) -> None:
    if options.log_dir is None:
        return
    try:
        options.log_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        (options.log_dir / f"attention_c-{stamp}-{name}").write_text(text)
    except OSError:
        pass


# -- the gate ------------------------------------------------------------------------------


def compare(got: Any, want: Any, what: str) -> float:
    """Check ``got`` (float32) against ``want`` (float64); return the worst error ratio.

    Raises GateFailure naming NaN/inf, or the worst element and which rows are wrong.
    """
    import numpy as np

    got64 = got.astype(np.float64)
    finite = np.isfinite(got64)
    if not finite.all():
        bad = int((~finite).sum())
        first = np.argwhere(~finite)[0].tolist()
        raise GateFailure(f"{what}: {bad} of {got.size} outputs are NaN or inf (first at index {first})")
    err = np.abs(got64 - want)
    bound = ATOL + RTOL * np.abs(want)
    ratio = err / bound
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    if ratio[worst] > 1.0:
        wrong = ratio > 1.0
        idx = tuple(int(i) for i in worst)
        detail = f"worst at index {list(idx)}: got {got64[idx]:.6g}, expected {want[idx]:.6g}"
        rows = ""
        if got.ndim == 3:  # say which query rows are wrong: a tail bug shows as the last rows
            bad_rows = np.flatnonzero(wrong.any(axis=(0, 2)))
            shown = ", ".join(map(str, bad_rows[:8])) + (" ..." if len(bad_rows) > 8 else "")
            rows = f"; wrong query rows ({len(bad_rows)} of {got.shape[1]}): {shown}"
        raise GateFailure(
            f"{what}: {int(wrong.sum())} of {got.size} outputs outside the tolerance "
            f"|err| <= {ATOL:g} + {RTOL:g}*|ref|; {detail}{rows}"
        )
    return float(ratio[worst])


@dataclass
class Judge:
    """What stays in the evaluator: the pinned CPUs, the reference and its clock, the spot-row RNG."""

    threads: int
    cpus: list[int]
    blas: list[dict[str, Any]]
    reference: Any
    picks: Any  # numpy Generator seeded from os.urandom: rows the candidate cannot predict

    def time_reference(self, q: Any, k: Any, v: Any, out: Any, causal: bool) -> float:
        """The NumPy reference, timed here: this thread's CPU time (1 thread) or wall time."""
        gc.disable()
        try:
            c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
            self.reference(q, k, v, out, causal)
            t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        finally:
            gc.enable()
        return (c1 - c0) * 1e-9 if self.threads == 1 else (t1 - t0) * 1e-9


@contextmanager
def judge(threads: int) -> Iterator[Judge]:
    """Pin this process to the CPUs the worker will get (it inherits them) and cap BLAS at ``threads``.

    Both sides of every timing pair then run on the same core(s); the reference runs on
    this (calling) thread, whose CPU clock is exact.
    """
    cpus = choose_cpus(threads)
    before = os.sched_getaffinity(0)
    for tid in os.listdir("/proc/self/task"):  # every thread: BLAS may have started some already
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass
    if threads > 1 and "numpy" not in sys.modules:
        # OpenBLAS's idle threads spin for ~2^28 cycles after each call by default: on the
        # shared CPUs, right into the kernel's timed call (measured: a 256-long call 1.07 ->
        # 2.32 ms). The shortest timeout lets them sleep at once; the reference then pays a
        # thread wake-up per call, as one call in a user's program does. Read when NumPy
        # loads OpenBLAS, so only before the first import (the notes say whether it was).
        os.environ["OPENBLAS_THREAD_TIMEOUT"] = "4"
    try:
        import numpy as np
        from threadpoolctl import threadpool_info, threadpool_limits

        from avo_target_attention_c.reference import NumpyAttention

        with threadpool_limits(limits=threads):
            blas = [{"api": i.get("internal_api"), "threads": i.get("num_threads")} for i in threadpool_info()]
            rng = np.random.default_rng(int.from_bytes(os.urandom(16), "big"))
            yield Judge(threads, cpus, blas, NumpyAttention(), rng)
    finally:
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), before)
            except OSError:
                pass


def max_floats(p: Plan) -> int:
    """The largest tensor any request of ``p`` needs (the shared memory is sized for it)."""
    return max([s.heads * s.n * D for s in p.gate] + [c.heads * c.n * D for c in p.configs])


def _call(box: Worker, who: str, heads: int, n: int, causal: bool, timeout: float, what: str) -> Any:
    if box.serving:  # the request loop in C (timed calls)
        cost = box.call(heads, n, D, causal, timeout, what)
    else:
        req = {"op": "call" if who == "kernel" else who, "heads": heads, "n": n, "d": D, "causal": causal}
        cost = box.request(req, timeout, what)
    box.audit(what, cost)
    return cost


def load_request(library: Path, serve: Path) -> dict[str, str]:
    """The worker's ``load`` request: the kernel, and our request loop (:func:`build.compile_serve`)."""
    return {"op": "load", "library": str(library), "cdef": PROTOTYPE, "symbol": SYMBOL,
            "serve": str(serve), "serve_cdef": SERVE_PROTOTYPE}


def _check_memory(box: Worker, q: Any, k: Any, v: Any, what: str) -> Any:
    """Guards and inputs after a call; returns out (a view of the shared memory)."""
    import numpy as np

    size = q.size
    if box.overrun(size):
        raise GateFailure(f"{what}: the kernel wrote outside out (the guard cells around it changed)")
    sq, sk, sv, out = box.views(size)
    modified = [name for name, a, c in zip("qkv", (sq, sk, sv), (q, k, v), strict=True)
                if not np.array_equal(a, c.reshape(-1), equal_nan=True)]
    if modified:
        raise GateFailure(f"{what}: the kernel modified its read-only input(s) {', '.join(modified)}")
    return out.reshape(q.shape)


def run_gate(box: Worker, p: Plan, seed: int) -> tuple[float, str]:
    """Every gate shape once; returns the worst error ratio and the shape it was at."""
    from avo_target_attention_c.reference import attention_f64, make_inputs

    worst, where = 0.0, ""
    for idx, shape in enumerate(p.gate, 1):
        what = f"gate shape {idx}/{len(p.gate)} ({shape.label()})"
        q, k, v = make_inputs(seed + idx, shape.heads, shape.n, D, shape.logit_scale, shape.skewed)
        box.put(q, k, v)
        # Generous for the seed at the largest shapes, far below any real hang.
        timeout = p.call_timeout + 1e-8 * shape.heads * shape.n * shape.n * D
        _call(box, "kernel", shape.heads, shape.n, shape.causal, timeout, f"running {what}")
        out = _check_memory(box, q, k, v, what)
        r = compare(out, attention_f64(q, k, v, shape.causal), what)
        if r >= worst:
            worst, where = r, shape.label()
    return worst, where


# -- timing --------------------------------------------------------------------------------


def check_timed(box: Worker, jd: Judge, q: Any, k: Any, v: Any, causal: bool, spot: int, what: str) -> None:
    """The output of a timed call: guards, inputs, all finite, and spot rows correct.

    The rows are drawn here, after the call, from a generator seeded from ``os.urandom``:
    the candidate cannot know which rows will be looked at, so it must compute them all.
    """
    import numpy as np

    from avo_target_attention_c.reference import rows_f64

    out = _check_memory(box, q, k, v, what)
    nonfinite = int((~np.isfinite(out)).sum())
    if nonfinite:
        raise GateFailure(
            f"{what}: {nonfinite} outputs are NaN or inf (out is filled with NaN before each "
            "call: a kernel that skips work or returns early leaves them)")
    heads, n, _ = q.shape
    picks = [(0, 0), (heads - 1, n - 1)]  # the first and the very last row: the tails
    picks += [(int(h), int(i)) for h, i in zip(jd.picks.integers(0, heads, spot), jd.picks.integers(0, n, spot),
                                                strict=True)]
    rows = np.stack([out[h, i] for h, i in picks])
    try:
        compare(rows, rows_f64(q, k, v, causal, picks), what)
    except GateFailure as exc:
        raise GateFailure(
            f"{exc}. Every timed call gets fresh inputs and is checked on rows drawn after it returns; a kernel "
            "that caches or reuses an earlier result, or computes only some rows, fails here") from None


def quad_ratios(pairs: list[tuple[float, float]]) -> list[float]:
    """Per quad, the geometric mean of its two ratios t_ref / t_cand; ``pairs`` alternate in order.

    ``pairs[2j]`` ran the reference first, ``pairs[2j + 1]`` the candidate first. The order
    matters: a call right after a call of its own side finds its buffers and code in the cache
    (measured here: NumPy 25-35 % faster after NumPy than after the kernel), so the ratios of
    one config fall into two clusters, one per order. A median over all pairs then lands
    anywhere in the gap between them, wherever a few pairs tip it; each quad holds one pair
    of each order (and two neighbours in time), so its ratio carries no order effect.
    """
    if len(pairs) % 2:
        raise ValueError(f"pairs come in quads (reference first, then candidate first); got {len(pairs)}")
    return [math.sqrt((pairs[i][0] / pairs[i][1]) * (pairs[i + 1][0] / pairs[i + 1][1]))
            for i in range(0, len(pairs), 2)]


# A quad whose reference-first NumPy call took over this factor times the config's 10th
# percentile ran while the machine was slow (measured here: phases of seconds in which the
# kernel's calls took 25-70 % longer and NumPy's 20-45 %, so the ratio fell by 5-15 %; the
# guest's core speed depends on what the host's other cores do). NumPy's calls in quiet
# phases stay within ~5 % of each other.
SLOW_FACTOR = 1.15
SLOW_PERCENTILE = 0.10
MIN_KEPT_QUADS = 6  # fewer quads at speed than this: use them all (and say so)
PROBE_S = 0.0005  # one run of the FMA probe beside each pair (plus its warm-up): ~2-15 % of a pair's time


def at_speed(pairs: Sequence[tuple[float, Any]]) -> list[bool]:
    """Per quad of ``pairs``, whether the machine ran at its usual speed (:data:`SLOW_FACTOR`).

    The signal is the reference-first pair's NumPy time: trusted (the evaluator's own call)
    and separated from the candidate's last call by another NumPy call, so the candidate
    cannot slow it down on purpose in the quads it would like left out.
    """
    refs = [pairs[i][0] for i in range(0, len(pairs) - 1, 2)]
    if not refs:
        return []
    fast = sorted(refs)[int(SLOW_PERCENTILE * len(refs))]
    return [t <= SLOW_FACTOR * fast for t in refs]


def speed_gated(pairs: list[tuple[float, float]]) -> tuple[list[float], int | None]:
    """The quad ratios timed at speed and how many were left out; all quads and ``None`` when
    fewer than :data:`MIN_KEPT_QUADS` were at speed (the machine's speed never settled).
    With fewer quads than that in all (quick mode's short configs), all of them, ungated."""
    quads = quad_ratios(pairs)
    if len(quads) < MIN_KEPT_QUADS:
        return quads, 0
    kept = [q for q, ok in zip(quads, at_speed(pairs), strict=True) if ok]
    if len(kept) < MIN_KEPT_QUADS:
        return quads, None
    return kept, len(quads) - len(kept)


def relative_iqr(values: list[float]) -> float:
    """(q75 - q25) / median: the spread of repeated measurements, robust to outliers."""
    if len(values) < 4:
        return (max(values) - min(values)) / statistics.median(values)
    q = statistics.quantiles(values, n=4)
    return (q[2] - q[0]) / q[1]


EMPTY_KERNEL = "void attention(const float *q, const float *k, const float *v, float *out,\n" \
    "               int heads, int n, int d, int causal)\n{\n    (void)q; (void)k; (void)v; (void)out;\n" \
    "    (void)heads; (void)n; (void)d; (void)causal;\n}\n"


def empty_twin(scratch: Path, threads: int, serve: Path) -> Worker:
    """The twin worker of an evaluation, with the empty kernel built and loaded (``scratch`` its
    own; ``serve`` the request loop, :func:`build.compile_serve`)."""
    source = scratch / "empty"
    source.mkdir(parents=True)
    (source / "kernel.c").write_text(EMPTY_KERNEL)
    build = compile_kernel(source, scratch / "empty-build")
    twin = Worker(scratch / "worker", threads, 1, readable=(build.library.parent, serve.parent), candidate=False)
    try:
        twin.request(load_request(build.library, serve), 60.0, "loading the empty kernel into the twin worker")
    except BaseException:
        twin.close()
        raise
    return twin


def _candidate_time(cost: Any, plumbing: float, threads: int) -> float:
    """The candidate's seconds: the worker's CPU (1 thread) or wall time, minus ``plumbing``."""
    return max((cost.cpu if threads == 1 else cost.wall) - plumbing, 1e-7)


def _plumbing(empties: list[Any], threads: int) -> float:
    """The median of the twin's empty calls timed beside a config's calls (CPU, or wall with threads)."""
    return statistics.median(t.cpu if threads == 1 else t.wall for t in empties)


@dataclass
class Round:
    """One config's round: its (t_ref, t_cand) pairs, the empty call subtracted, the probe's runs (GFLOP/s)."""

    pairs: list[tuple[float, float]]
    plumbing: float
    probe: list[float]


def _pairs(box: Worker, twin: Worker, jd: Judge, p: Plan, cfg: Any, who: str, seed: int, rounds: int, check: bool,
           before: list[tuple[float, float]], probe: Probe | None = None) -> Round:
    """One round of interleaved (reference, candidate) pairs for ``cfg``, on fresh inputs each.

    An even number of pairs, the reference first in even ones (see :func:`quad_ratios`).
    The round's minimum counts only pairs timed at speed, judged against ``before`` (this
    config's earlier rounds) and this round: a slow phase of the machine lengthens the
    round, up to its maximum, instead of filling it.

    What a call costs besides the kernel (the request loop's socket read, the call and the
    reply) is the same request to an empty function (:data:`EMPTY_KERNEL`, ours), timed right
    after every candidate call, under the same conditions (caches taken by the reference, the
    checks and the kernel), in ``twin``: a second worker that never loads candidate code, so
    no kernel can make what is subtracted grow. Measured back to back before the kernel was
    loaded, a no-op ran hot and was 50-80 us short of what it costs here, and a no-op beside
    the calls still 37-44 us short of an empty call's cost (round four's operator), all of it
    charged to every call.
    ``probe``: the FMA probe, run once after every pair (the roof column's denominator).
    """
    import numpy as np

    from avo_target_attention_c.reference import make_inputs

    heads, n, causal = cfg.heads, cfg.n, cfg.causal
    timeout = p.call_timeout + 1e-8 * heads * n * n * D
    ref_out = np.empty((heads, n, D), dtype=np.float32)
    # Warm-up: page in both code paths and buffers once, untimed (but checked). The
    # reference last, so the first pair's reference, like every reference-first pair's,
    # follows a reference call.
    if who == "kernel":  # timed calls go through the request loop in C, in both workers (build.SERVE_SOURCE)
        box.serve()
        twin.serve()
    empty = {"op": "call", "heads": heads, "n": n, "d": D, "causal": causal}  # torch's plumbing: JSON both sides
    q, k, v = make_inputs(seed - 1, heads, n, D)
    box.put(q, k, v)
    _call(box, who, heads, n, causal, timeout, f"warming up {cfg.key}")
    if check:
        check_timed(box, jd, q, k, v, causal, p.spot_rows, f"warm-up call of {cfg.key}")
    jd.time_reference(q, k, v, ref_out, causal)
    min_pairs, max_pairs = (2 * math.ceil(x / rounds / 2) for x in (p.min_pairs, p.max_pairs))
    min_time, max_time = p.min_time / rounds, p.max_time / rounds
    pairs: list[tuple[float, Any]] = []  # (t_ref, the candidate call's cost), the empty call not yet subtracted
    empties: list[Any] = []
    rates: list[float] = []
    started = time.perf_counter()
    for r in range(max_pairs):
        q, k, v = make_inputs(seed + r, heads, n, D)
        what = f"timed call {r + 1} of {cfg.key}"
        # The inputs go to the worker right before its call, never before the reference: for
        # the 3-25 ms NumPy takes, a kernel's signal handler computed out early, in a gap's
        # allowance (the request after a put also counts what the worker ran since the put).
        reference_first = len(pairs) % 2 == 0  # alternate the order so neither side always runs second (quads)
        if reference_first:
            t_ref = jd.time_reference(q, k, v, ref_out, causal)
        box.put(q, k, v)
        cost = _call(box, who, heads, n, causal, timeout, f"running {what}")
        blank = (twin.call(heads, n, D, causal, 10.0, f"timing the empty call beside {what}") if twin.serving
                 else twin.request(empty, 10.0, f"timing the empty call beside {what}"))
        if not reference_first:
            t_ref = jd.time_reference(q, k, v, ref_out, causal)
        if check:
            check_timed(box, jd, q, k, v, causal, p.spot_rows, what)
        # What either worker ran between its reply and now (the check has read out) is its call's.
        cost = box.settle(cost)
        empties.append(twin.settle(blank))
        if cost.after_busy_gap:
            continue  # the worker ran before this call (the host, or the kernel): not timed
        pairs.append((t_ref, cost))
        if probe is not None:
            rates.append(probe.rate() * jd.threads)
        elapsed = time.perf_counter() - started
        if len(pairs) % 2:
            continue  # only whole quads
        if len(pairs) >= min_pairs and elapsed >= min_time \
                and 2 * sum(at_speed(before + pairs)[len(before) // 2:]) >= min_pairs:
            break
        if elapsed >= max_time and len(pairs) >= 4:
            break
    for worker in (box, twin):
        if worker.serving:
            worker.unserve()
    box.audit_tree(f"timing {cfg.key}")
    if len(pairs) % 2:  # a left-out call ended the round mid-quad: only whole quads
        pairs.pop()
    plumbing = _plumbing(empties, jd.threads)
    return Round([(t_ref, _candidate_time(c, plumbing, jd.threads)) for t_ref, c in pairs], plumbing, rates)


def measure(box: Worker, twin: Worker, jd: Judge, p: Plan, who: str, seed: int, check: bool = True,
            report: Callable[[str], None] = log, probe: Probe | None = None, matrix: float | None = None,
            ) -> tuple[dict[str, float], dict[str, float], list[str]]:
    """Interleaved timing of ``who`` against the NumPy reference for every config.

    Returns (speedups, spreads, table lines). The speedup of a config is the median over
    quads of the geometric mean of two pairs' t_numpy / t_candidate, each pair measured back
    to back on the same inputs, one pair of each order (:func:`quad_ratios`), leaving out
    quads timed while the machine ran slow (:func:`speed_gated`); its spread is the
    relative IQR of those quad ratios.
    ``probe`` (the FMA probe, run beside every pair) adds two columns: its median GFLOP/s over
    the config's pairs (times the thread count) and the kernel's GFLOP/s as a fraction of it;
    ``matrix`` (the matrix engine's bf16 peak, if any) raises the plausibility bound (:func:`beyond_roof`).
    ``twin``: the kernel-free worker whose no-ops are subtracted (:func:`_pairs`).
    """
    from avo_target_attention_c.reference import flops

    metrics: dict[str, float] = {}
    spread: dict[str, float] = {}
    lines = [f"{'config':<18}{'speedup':>8}{'kernel ms':>11}{'numpy ms':>10}{'GFLOP/s':>9}{'pairs':>6}{'iqr':>7}"
             + (f"{'probe':>7}{'roof':>6}" if probe else "")]
    # Round-robin over the configs in several rounds: the machine's speed drifts over tens
    # of seconds (other jobs, the host's other tenants), and the reference and the kernel
    # do not drift alike, so each config samples the whole evaluation, not one window.
    rounds = max(1, p.rounds)
    collected: dict[str, list[tuple[float, float]]] = {cfg.key: [] for cfg in p.configs}
    # Wall-clock timing (more threads) is refused where other processes ran on our CPUs (contention.py).
    watched = jd.threads > 1 and p.steady is not None
    others: dict[str, Tally] = {cfg.key: Tally() for cfg in p.configs}
    rates: dict[str, list[float]] = {cfg.key: [] for cfg in p.configs}
    plumbing: list[float] = []
    for rnd in range(rounds):
        for ci, cfg in enumerate(p.configs):
            if watched:
                t0, u0 = time.monotonic(), usage(jd.cpus, (box.cpu_ns(), twin.cpu_ns()))
            got = _pairs(box, twin, jd, p, cfg, who, seed + 100_000 * ci + 10_000 * rnd, rounds, check,
                         collected[cfg.key], probe)
            if watched:
                u1 = usage(jd.cpus, (box.cpu_ns(), twin.cpu_ns()))
                others[cfg.key].add(u0, u1, time.monotonic() - t0, len(jd.cpus))
            collected[cfg.key] += got.pairs
            rates[cfg.key] += got.probe
            plumbing.append(got.plumbing)
    slow: list[str] = []
    implausible: list[str] = []
    unsteady: list[str] = []
    contended: list[str] = []
    steadiness: list[str] = []
    for cfg in p.configs:
        pairs = collected[cfg.key]
        if jd.threads > 1 and p.steady is not None:
            swings = []
            for side, times in (("NumPy", [t for t, _ in pairs]), (who, [t for _, t in pairs])):
                fast = sorted(times)[int(SLOW_PERCENTILE * len(times))]
                swings.append((statistics.median(times) / fast, side, statistics.median(times), fast))
                steadiness.append(f"{cfg.key} {side} {swings[-1][0]:.2f}")
            swing, side, median, fast = max(swings)
            if swing > p.steady:
                contended.append(f"{side}'s calls at {cfg.key} took a median of {median * 1e3:.2f} ms against "
                                 f"{fast * 1e3:.2f} ms at their fastest tenth")
        ratios, dropped = speed_gated(pairs)
        if dropped:
            slow.append(f"{cfg.key} {dropped} of {len(pairs) // 2}")
        elif dropped is None:
            unsteady.append(cfg.key)
        speedup = statistics.median(ratios)
        t_cand = statistics.median(t for _, t in pairs)
        t_ref = statistics.median(t for t, _ in pairs)
        metrics[cfg.key] = speedup
        spread[cfg.key] = relative_iqr(ratios)
        gflops = flops(cfg.heads, cfg.n, D, cfg.causal) / t_cand * 1e-9
        line = f"{cfg.key:<18}{speedup:>8.3f}{t_cand * 1e3:>11.3f}{t_ref * 1e3:>10.3f}{gflops:>9.1f}{len(pairs):>6}"
        line += f"{spread[cfg.key]:>7.1%}"
        if rates[cfg.key]:
            roof = statistics.median(rates[cfg.key])
            line += f"{roof:>7.0f}{gflops / roof:>6.0%}"
            why = beyond_roof(cfg.key, gflops, roof, p.quick, matrix)
            if why is not None:
                implausible.append(why)
        lines.append(line)
        report(line)
    if implausible:
        raise Implausible(
            "not scored: faster than this machine can compute: " + "; ".join(implausible)
            + ". A kernel's time must include all its work, done while the call runs, in the worker's own "
            "request loop; the full table is in the evaluation log")
    crowded = [f"{key} {t.share:.0%}" for key, t in others.items() if t.share > FOREIGN_MAX]
    if watched and crowded:
        raise TooBusyToTime(
            f"not timed: other processes ran on the evaluation's CPUs while it timed {jd.threads} threads per side "
            f"on the wall clock, for this share of the CPUs' time: {', '.join(crowded)} (over {FOREIGN_MAX:.0%} is "
            "refused). Taking a CPU from one side's threads slows the sides unequally (a busy loop pinned to one CPU "
            "made a kernel of 8.1 score 40.5): evaluate again when nothing else runs")
    if contended:
        raise TooBusyToTime(
            f"not timed: the machine was too busy for a {jd.threads}-thread measurement on the wall clock: "
            + "; ".join(contended[:3]) + (f" (and {len(contended) - 3} more configs)" if len(contended) > 3 else "")
            + f" (over {p.steady:g}x). A ratio timed so measures the contention, not the kernel: evaluate again "
            "when the machine is quieter (one thread per side is timed on CPU clocks and holds up under load)")
    if steadiness:
        line = (f"median / fastest tenth of the calls (wall clock; over {p.steady:g}x is refused): "
                + ", ".join(steadiness))
        lines.append(line)
        report(line)
    if watched:
        line = (f"other processes on the evaluation's CPUs while timing (share of their time; over {FOREIGN_MAX:.0%} "
                "is refused): " + ", ".join(f"{key} {t.share:.0%}" for key, t in others.items()))
        lines.append(line)
        report(line)
    line = (f"subtracted from each call: an empty call timed beside it in a twin worker without candidate code "
            f"(median per config and round) {min(plumbing) * 1e6:.0f}-{max(plumbing) * 1e6:.0f} us; a no-op back "
            f"to back before the kernel was loaded: {(box.noop.cpu if jd.threads == 1 else box.noop.wall) * 1e6:.0f}"
            " us")
    lines.append(line)
    report(line)
    if box.busy_gaps:
        line = (f"{len(box.busy_gaps)} timed call(s) left out: the worker used "
                f"{', '.join(f'{g * 1e3:.1f}' for g in box.busy_gaps)} ms of CPU since its previous reply "
                "(a host that took the CPU, or work after returning)")
        lines.append(line)
        report(line)
    if box.late_work:
        line = (f"{len(box.late_work)} timed call(s) charged CPU the worker used after replying, before their "
                f"output was checked (work finished after returning is the call's): up to "
                f"{max(box.late_work) * 1e3:.2f} ms")
        lines.append(line)
        report(line)
    if slow:
        line = (f"quads left out, timed while the machine ran slow (their reference-first NumPy call over "
                f"{SLOW_FACTOR:g}x the config's {SLOW_PERCENTILE * 100:.0f}th percentile): {', '.join(slow)}")
        lines.append(line)
        report(line)
    if unsteady:
        line = (f"the machine's speed was unsteady while timing {', '.join(unsteady)}: fewer than {MIN_KEPT_QUADS} "
                "quads at speed, so all quads were used (expect more noise in these configs)")
        lines.append(line)
        report(line)
    return metrics, spread, lines


def _thread_note(jd: Judge, threads: int) -> str:
    blas = ", ".join(f"{b['api']} {b['threads']} thread(s)" for b in jd.blas) or "no BLAS found"
    if threads > 1:
        idle = "sleep when idle" if os.environ.get("OPENBLAS_THREAD_TIMEOUT") == "4" else "spin when idle"
        blas += f" (OpenBLAS threads {idle})"
    return (f"threads: candidate {threads} (OMP_NUM_THREADS={threads}, sandbox worker pinned "
            f"to CPU {','.join(map(str, jd.cpus))}); NumPy reference: {blas} (threadpoolctl), in the evaluator "
            "pinned to the same CPU(s)")


def _clock_note(threads: int) -> str:
    if threads == 1:
        return ("kernel: CPU time of the whole sandbox worker read from outside, from the write of its inputs, minus "
                "an empty call timed beside the calls; NumPy: CPU time of the evaluator's thread")
    return "both: wall-clock time measured by the evaluator (kernel minus an empty call timed beside the calls)"


# -- the whole evaluation ------------------------------------------------------------------


def input_seeds(options: EvalOptions, workdir: Path) -> tuple[int, int]:
    """Seeds of the gate's and the benchmark's inputs for this candidate in this run.

    From the run's secret (only this process has it) and the candidate's content: the same
    tree replays the same inputs, and no tree can be written against its own.
    """
    return (derived_seed(options, workdir, "attention_c gate"), derived_seed(options, workdir, "attention_c bench"))


def evaluate(workdir: Path, options: EvalOptions) -> EvalResult:
    """Build, gate, time. Never raises for a bad candidate: the result says what went wrong."""
    started = time.monotonic()
    try:
        p = plan(options.quick)
    except ValueError as exc:
        return failed(str(exc))
    gate_seed, bench_seed = input_seeds(options, workdir)
    with tempfile.TemporaryDirectory(prefix="avo-attention-c-") as tmp:
        scratch = Path(tmp)
        try:
            build = compile_kernel(workdir, scratch / "build")
        except BuildError as exc:
            log(f"build failed:\n{exc.full or exc.message}")
            _save_log(options, "build.log", exc.full or exc.message)
            return failed(exc.message)
        log(f"built: {' '.join(build.command)}")
        if build.output:
            log(f"compiler output:\n{build.output}")
        try:
            # The twin first: without a sandbox, the candidate's worker counts the processes
            # started after it as the kernel's children.
            serve = compile_serve(scratch / "serve")
            with judge(p.threads) as jd, empty_twin(scratch / "twin", p.threads, serve) as twin, \
                    Worker(scratch / "sandbox", p.threads, max_floats(p),
                           readable=(build.library.parent, serve.parent)) as box:
                threads = _thread_note(jd, p.threads)
                log(threads)
                box.request(load_request(build.library, serve), 60.0, "loading the compiled kernel")
                box.audit("loading the kernel (its constructors ran)")
                worst, where = run_gate(box, p, gate_seed)
                log(f"gate passed: {len(p.gate)} shapes, worst error {worst:.3f} of the tolerance ({where})")
                probe = Probe.build(scratch)
                peak = matrix = None
                if probe is not None:
                    peak = probe.best() * p.threads
                    engine = probe.matrix_best()
                    matrix = None if engine is None else engine * p.threads
                    probe.size(PROBE_S)
                metrics, spread, table = measure(box, twin, jd, p, "kernel", bench_seed, probe=probe, matrix=matrix)
                clock = _clock_note(p.threads)
        except (GateFailure, SandboxFailure, TooBusyToTime, Implausible, BuildError) as exc:
            log(f"failed: {exc}")
            return failed(str(exc))
    scalar = geometric_mean(metrics.values())
    flags = " ".join(build.flags) or "(none)"
    notes = "\n".join([
        f"gate: {len(p.gate)} shapes vs float64 passed; worst error {worst:.3f} of the tolerance at {where}",
        threads,
        f"cflags.txt: {flags}; speedup = median over quads of pairs of t_numpy / t_kernel (interleaved, "
        f"both orders, fresh inputs; {clock})",
        roof_note(peak, p.threads, matrix),
        *table,
        f"geometric mean {scalar:.4f}; evaluation took {time.monotonic() - started:.1f} s"
        + (" (quick mode)" if options.quick else ""),
    ])
    return EvalResult(correct=True, metrics=metrics, spread=spread, notes=notes)


def baselines(options: EvalOptions) -> dict[str, EvalResult]:
    """NumPy (1.0 by definition) and, when torch is installed, torch's CPU SDPA as ratios."""
    import importlib.util

    p = plan(options.quick)
    keys = [c.key for c in p.configs]
    have_torch = importlib.util.find_spec("torch") is not None
    numpy_note = "the reference itself: every ratio is 1.0 by definition"
    if not have_torch:
        numpy_note += "; torch is not installed, so the torch SDPA baseline was skipped"
    out = {"numpy": EvalResult(correct=True, metrics=dict.fromkeys(keys, 1.0), notes=numpy_note)}
    if have_torch:
        try:
            # torch runs in the sandbox worker like a candidate, timed the same way from here.
            with tempfile.TemporaryDirectory(prefix="avo-attention-c-") as tmp, judge(p.threads) as jd, \
                    empty_twin(Path(tmp) / "twin", p.threads, compile_serve(Path(tmp) / "serve")) as twin, \
                    Worker(Path(tmp) / "box", p.threads, max_floats(p), candidate=False) as box:
                metrics, spread, table = measure(box, twin, jd, p, "torch",
                                                 derived_seed(options, None, "attention_c torch"))
            out["torch_sdpa"] = EvalResult(correct=True, metrics=metrics, spread=spread, notes="\n".join(table))
        except (GateFailure, SandboxFailure, TooBusyToTime, BuildError) as exc:
            out["torch_sdpa"] = failed(f"torch SDPA baseline failed: {exc}")
    return out
