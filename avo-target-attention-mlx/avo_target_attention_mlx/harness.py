"""The evaluation: gate every call's output, time the candidate interleaved with MLX's SDPA.

This runs in avo's trusted evaluator child and never imports candidate code. The candidate
runs in its own sandboxed worker process (:mod:`.workers`), and so does the reference
(MLX's SDPA, in a second worker started the same way), so both pay the same request,
copy and process costs. The inputs' seeds, the float64 references and the clock stay
here: each call is timed by this process around a request/response to a worker pinned to
one CPU, minus a no-op round trip and the input copy, both measured on the reference
worker (which runs only this package's code, so its figures can be trusted).
"""

from __future__ import annotations

import math
import os
import random
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from avo.eval_inputs import derived_seed
from avo.models import EvalOptions, EvalResult
from avo.sandbox import current_level
from avo_target_attention_mlx.configs import (
    ERROR_BUDGET,
    FULL_REPS,
    QUICK_REPS,
    DecodeConfig,
    configs_for,
)
from avo_target_attention_mlx.reference import ConfigInputs, make_inputs
from avo_target_attention_mlx.workers import TreeShape, Worker, WorkerFailure

ENTRYPOINT = "attention.py"
FUNCTION = "decode_attention"
KERNELS = Path(__file__).resolve().parent / "kernels"
REFERENCE_LABEL = "mx.fast.scaled_dot_product_attention"
WARMUP_CALLS = 1  # untimed but checked, after the gate call
NOOP_PINGS = 31
# CPU the candidate's sandbox may use outside its own calls (a 10 ms accounting tick may
# land on either side of a call; honest workers measured 0.000 s here), and beyond the wall
# time inside them. Burning this much while SDPA is timed gains 1-3 % of a full evaluation.
IDLE_CPU_SLACK_S = 0.02
IDLE_CPU_FRACTION = 0.01
# CPU of ended threads is a process's total minus its live threads' (each rounded to 10 ms
# ticks on its own), so two readings disagree by a few ticks even when nothing ended.
ENDED_CPU_SLACK_S = 0.1


class CandidateFailure(Exception):
    """A candidate broke the contract; the message names the config and the problem."""


@dataclass(frozen=True)
class Kernel:
    """Something timed against SDPA: a folder holding ``attention.py``."""

    label: str
    path: Path


@dataclass
class ConfigScore:
    config: DecodeConfig
    speedup: float
    spread: float
    worst_error: float
    cand_s: float
    ref_s: float
    ref_ratios: list[float] = field(default_factory=list)


def pick_dtype() -> tuple[str, str]:
    """(dtype name, device name): half precision where MLX runs on a GPU, float32 on CPU,
    where MLX's float16 is several times slower than float32. ``AVO_MLX_DTYPE`` overrides."""
    import mlx.core as mx

    device = mx.default_device()
    on_gpu = device.type == mx.gpu
    backend = "cpu"
    if on_gpu:
        backend = "metal" if mx.metal.is_available() else "cuda"
    dtype = os.environ.get("AVO_MLX_DTYPE") or ("float16" if on_gpu else "float32")
    if dtype not in ("float32", "float16", "bfloat16"):
        raise ValueError(f"AVO_MLX_DTYPE must be float32, float16 or bfloat16, got {dtype!r}")
    return dtype, f"{device} ({backend}, mlx {getattr(mx, '__version__', '?')})"


def stream_bandwidth() -> float:
    """Streaming copy bandwidth in GB/s (bytes read + written), best of 7, NumPy."""
    import numpy as np

    src = np.ones(8 << 20, dtype=np.float64)  # 64 MiB, past the 32 MiB L3
    dst = np.empty_like(src)
    dst.fill(0.0)  # fault the pages in first: a first touch is not bandwidth
    best = math.inf
    for _ in range(7):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.nbytes / best / 1e9


def candidate_kernel(workdir: Path) -> Kernel:
    """The candidate in ``workdir`` (its files are copied into the worker's scratch)."""
    if not (workdir / ENTRYPOINT).is_file():
        raise CandidateFailure(f"{ENTRYPOINT} not found in the candidate directory {workdir}")
    return Kernel(f"{ENTRYPOINT}:{FUNCTION}", workdir)


def _pin_cpu() -> int:
    """The CPU both workers are pinned to: the last this process may use."""
    try:
        return max(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return 0


class Suite:
    """All configs' inputs and references (built here, never in a worker) and the reference worker."""

    def __init__(self, quick: bool, options: EvalOptions, workdir: Path | None) -> None:
        import numpy as np

        # Who goes first in a pair is drawn from OS entropy, not a pattern a candidate
        # could predict and time itself against.
        self._order = random.Random(int.from_bytes(os.urandom(8), "little"))
        self.quick = quick
        self.reps = QUICK_REPS if quick else FULL_REPS
        self.dtype, self.device = pick_dtype()
        self.cpu = _pin_cpu()
        self.stream_gbs = stream_bandwidth()
        n_calls = 1 + WARMUP_CALLS + self.reps
        self.inputs: list[ConfigInputs] = [
            make_inputs(c, n_calls, self.dtype, derived_seed(options, workdir, f"inputs:{c.name}"))
            for c in configs_for(quick)
        ]
        # Inputs in shared memory: one file per config, read-only inside the sandboxes.
        shm_root = "/dev/shm" if os.path.isdir("/dev/shm") else None  # RAM, not disk
        self.shm = Path(tempfile.mkdtemp(prefix="avo-mlx-inputs-", dir=shm_root))
        self._maps = []
        for i, ci in enumerate(self.inputs):
            n = ci.calls[0].q.size + 2 * ci.k_base.size
            self._maps.append(np.memmap(self.shm / f"config{i}.bin", dtype=np.float32, mode="w+", shape=(n,)))
        self._np = np
        self.ref: Worker | None = None
        self.noop_s = 0.0
        self.ref_shape: TreeShape | None = None
        self._ended0 = ((0.0, 0.0), (0.0, 0.0))
        self._tasks0: tuple[int | None, int | None] = (None, None)
        self._ended_sum = (0.0, 0.0, 0.0, 0.0)

    # -- workers -------------------------------------------------------------------------

    def start(self, kernel: Kernel) -> Worker:
        """A worker for ``kernel`` (the reference worker is started alongside the first one)."""
        first = self.ref is None
        if first:
            self.ref = Worker(REFERENCE_LABEL, KERNELS / "sdpa", self.shm, self.cpu, self.dtype)
            self.ref.start()
        assert self.ref is not None
        worker = Worker(kernel.label, kernel.path, self.shm, self.cpu, self.dtype)
        try:
            worker.start()  # both import MLX at once
            if first:
                self.ref.finish_start()
            worker.finish_start()
        except WorkerFailure:
            worker.close()
            raise
        if self.noop_s == 0.0:
            self.noop_s = statistics.median(self.ref.request({"op": "ping"})[1] for _ in range(NOOP_PINGS))
        return worker

    def close(self) -> None:
        if self.ref is not None:
            self.ref.close()
        del self._maps
        shutil.rmtree(self.shm, ignore_errors=True)

    # -- one call ------------------------------------------------------------------------

    def _write_call(self, idx: int, call: int) -> None:
        """Put call ``call`` of config ``idx`` into the shared inputs (just before it runs)."""
        np, ci = self._np, self.inputs[idx]
        c, mm = ci.calls[call], self._maps[idx]
        nq, nkv = c.q.size, ci.k_base.size
        mm[:nq] = c.q.reshape(-1)
        np.multiply(ci.k_base.reshape(-1), np.float32(c.k_factor), out=mm[nq:nq + nkv])
        np.multiply(ci.v_base.reshape(-1), np.float32(c.v_factor), out=mm[nq + nkv:])

    def _call(self, worker: Worker, idx: int, name: str, timed: bool = True) -> tuple[float, float, float]:
        """One call in ``worker``: (wall s, its own copy time, CPU s of its sandbox during it).

        Only timed calls, and the waits before them, are policed for CPU: the gate and warm-up
        calls may compile (``mx.compile`` on the CPU runs the system's C++ compiler)."""
        worker.out_map[:] = math.nan  # poisoned: a worker that writes nothing returns NaN
        cpu0 = worker.cpu_seconds()
        try:
            reply, wall = worker.request({"op": "call"}, what=f"running config {name}")
        except WorkerFailure as exc:
            raise CandidateFailure(f"config {name}: {exc}") from None
        cpu1 = worker.cpu_seconds()
        if timed:
            worker.idle_cpu += cpu0 - worker.last_cpu
        worker.last_cpu = cpu1
        return wall, float(reply.get("copy_s", 0.0)), cpu1 - cpu0

    def _error(self, worker: Worker, idx: int, call: int, what: str) -> float:
        """Relative error of one output; raises CandidateFailure past the budget."""
        np, ci = self._np, self.inputs[idx]
        c, cfg = ci.calls[call], ci.config
        name = cfg.name
        got = np.array(worker.out_map, dtype=np.float64)
        if not np.all(np.isfinite(got)):
            raise CandidateFailure(f"config {name}: {worker.label} returned NaN or inf ({what}), or left "
                                   "the output buffer unwritten (it is filled with NaN before every call)")
        err = float(np.max(np.abs(got - c.reference))) / c.v_max
        if not err <= ERROR_BUDGET:
            raise CandidateFailure(
                f"config {name} ({cfg.describe()}): {what} error {err:.3g} is over the budget "
                f"{ERROR_BUDGET:g} (max |out - ref| / max |V|, {err / ERROR_BUDGET:.0f}x the budget). "
                "Check the scale, the GQA mapping (query head h reads KV head h // (Hq/Hkv)) "
                "and how much softmax mass an approximation drops."
            )
        return err

    @staticmethod
    def _tasks(worker: Worker, name: str) -> int | None:
        try:
            return worker.tasks()
        except WorkerFailure as exc:
            raise CandidateFailure(f"config {name}: {exc}") from None

    def _police(self, worker: Worker, name: str, cpu_in_calls: float, wall_in_calls: float,
                last: bool = False) -> None:
        """Fail a candidate whose sandbox runs more than the reference worker's does."""
        assert self.ref_shape is not None
        shape = worker.shape()
        allowed_threads = max(len(t) for _, _, t in self.ref_shape.processes)
        extra_procs = len(shape.processes) - len(self.ref_shape.processes)
        if extra_procs > 0:
            raise CandidateFailure(
                f"config {name}: {worker.label} started {extra_procs} process(es) it was not allowed: its "
                f"sandbox runs {shape.describe()}, the reference worker's {self.ref_shape.describe()}")
        for pid, comm, threads in shape.processes:
            if len(threads) > allowed_threads:
                raise CandidateFailure(
                    f"config {name}: {worker.label} started threads it was not allowed: pid {pid} ({comm}) "
                    f"runs {len(threads)} threads {sorted(threads)}, the reference worker at most "
                    f"{allowed_threads} ({self.ref_shape.describe()})")
        assert self.ref is not None
        (w_threads, w_children), (r_threads, r_children) = self._ended0
        threads_s, children_s = worker.ended_work()
        ref_threads_s, ref_children_s = self.ref.ended_work()
        threads_s = self._ended_sum[0] + threads_s - w_threads
        children_s = self._ended_sum[1] + children_s - w_children
        ref_threads_s = self._ended_sum[2] + ref_threads_s - r_threads
        ref_children_s = self._ended_sum[3] + ref_children_s - r_children
        if last:
            self._ended_sum = (threads_s, children_s, ref_threads_s, ref_children_s)
        if children_s > ref_children_s + ENDED_CPU_SLACK_S:
            raise CandidateFailure(
                f"config {name}: {worker.label} started processes it was not allowed: child processes "
                f"that have already ended used {children_s:.2f} s of CPU in its sandbox during the timed "
                f"calls (the reference worker's: {ref_children_s:.2f} s)")
        if threads_s > ref_threads_s + ENDED_CPU_SLACK_S:
            raise CandidateFailure(
                f"config {name}: {worker.label} started threads it was not allowed: threads that have "
                f"already ended used {threads_s:.2f} s of CPU in its worker during the timed calls (the "
                f"reference worker's: {ref_threads_s:.2f} s), e.g. a helper thread started and joined in a call")
        (w_tasks, r_tasks), created = self._tasks0, self._tasks(worker, name)
        if w_tasks is not None and created is not None and r_tasks is not None:
            ref_created = (self._tasks(self.ref, name) or r_tasks) - r_tasks
            if created - w_tasks > ref_created:
                raise CandidateFailure(
                    f"config {name}: {worker.label} started threads or processes it was not allowed: "
                    f"{created - w_tasks} task(s) were created in its sandbox during the timed calls (the reference "
                    f"worker's: {ref_created}), e.g. a child process the kernel reaps itself with SIGCHLD ignored")
        escapes = worker.affinity_escapes()
        if escapes:
            raise CandidateFailure(f"config {name}: {worker.label} changed its CPU pinning: "
                                   + "; ".join(escapes))
        if worker.idle_cpu > IDLE_CPU_SLACK_S + IDLE_CPU_FRACTION * worker.busy_wall:
            raise CandidateFailure(
                f"config {name}: {worker.label}'s sandbox used {worker.idle_cpu:.2f} s of CPU between its "
                f"calls (in {worker.busy_wall:.2f} s of calls): work done outside the timed calls, e.g. by "
                "a helper thread or process or by reading the inputs early")
        if cpu_in_calls > 1.2 * wall_in_calls + IDLE_CPU_SLACK_S:
            raise CandidateFailure(
                f"config {name}: {worker.label}'s sandbox used {cpu_in_calls:.2f} s of CPU in "
                f"{wall_in_calls:.2f} s of calls on one pinned CPU: work ran in parallel elsewhere")

    # -- the whole suite -----------------------------------------------------------------

    def measure(self, kernel: Kernel) -> list[ConfigScore]:
        """Gate, warm up, then time ``kernel`` against SDPA in interleaved pairs per config."""
        try:
            worker = self.start(kernel)
        except WorkerFailure as exc:
            raise CandidateFailure(str(exc)) from None
        try:
            return self._measure(worker)
        finally:
            worker.close()

    def _measure(self, worker: Worker) -> list[ConfigScore]:
        ref = self.ref
        assert ref is not None
        scores = []
        self._ended_sum = (0.0, 0.0, 0.0, 0.0)
        for idx, ci in enumerate(self.inputs):
            cfg, name = ci.config, ci.config.name
            msg = {"op": "config", "inputs": str(self.shm / f"config{idx}.bin"),
                   "shape": [cfg.batch, cfg.q_heads, cfg.kv_heads, cfg.length, cfg.head_dim], "scale": ci.scale}
            for w in (ref, worker):
                try:
                    w.configure(msg)
                except WorkerFailure as exc:
                    raise CandidateFailure(f"config {name}: {exc}") from None
            worst = 0.0
            # Gate call and warm-up: untimed, checked.
            for call in range(1 + WARMUP_CALLS):
                self._write_call(idx, call)
                self._call(worker, idx, name, timed=False)
                what = "the gate call's" if call == 0 else "the warm-up call's"
                worst = max(worst, self._error(worker, idx, call, what))
                self._call(ref, idx, name, timed=False)
                self._check_reference(idx, call)
            if self.ref_shape is None:
                self.ref_shape = ref.shape()
            t_ref: list[float] = []
            t_cand: list[float] = []
            cpu_in, wall_in = 0.0, 0.0
            # What ended threads and processes did so far (compiling, at the gate) is allowed;
            # what they do in timed calls adds up over the configs.
            self._ended0 = (worker.ended_work(), ref.ended_work())
            self._tasks0 = (self._tasks(worker, name), self._tasks(ref, name))
            for rep in range(self.reps):
                call = 1 + WARMUP_CALLS + rep
                self._write_call(idx, call)
                # Random order: the second runner may find K/V still in cache, and a fixed
                # pattern could be gamed.
                order = (ref, worker) if self._order.random() < 0.5 else (worker, ref)
                got: dict[str, tuple[float, float, float]] = {}
                for w in order:
                    got[w.label if w is worker else "ref"] = self._call(w, idx, name)
                wall_c, _, cpu_c = got[worker.label]
                wall_r, copy_r, _ = got["ref"]
                # The same no-op round trip and input copy (both measured on the reference
                # worker, whose code is ours) come off both times.
                overhead = self.noop_s + copy_r
                t_ref.append(max(wall_r - overhead, 1e-6))
                t_cand.append(max(wall_c - overhead, 1e-6))
                cpu_in += cpu_c
                wall_in += wall_c
                worker.busy_wall += wall_c
                worst = max(worst, self._error(worker, idx, call,
                                               f"timed call {rep + 1}'s (timed outputs are checked too)"))
                self._check_reference(idx, call)
                self._police(worker, name, cpu_in, wall_in, last=rep == self.reps - 1)
            ratios = [r / c for r, c in zip(t_ref, t_cand, strict=True)]
            med = statistics.median(ratios)
            mad = statistics.median(abs(r - med) for r in ratios)
            # Median of per-pair ratios: the two calls of a pair run back to back, so a slow
            # spell of a shared machine cancels within the pair.
            scores.append(ConfigScore(
                config=cfg, speedup=med,
                spread=1.4826 * mad / med, worst_error=worst, cand_s=statistics.median(t_cand),
                ref_s=statistics.median(t_ref), ref_ratios=ratios,
            ))
        return scores

    def _check_reference(self, idx: int, call: int) -> None:
        assert self.ref is not None
        try:
            self._error(self.ref, idx, call, "the reference")
        except CandidateFailure as exc:
            raise CandidateFailure(f"MLX's SDPA itself fails the check ({exc}): the reference worker "
                                   "or MLX is broken") from None

    def result(self, kernel: Kernel, scores: list[ConfigScore]) -> EvalResult:
        """The evaluator contract with notes on the error budget and the roofline."""
        itemsize = {"float32": 4, "float16": 2, "bfloat16": 2}[self.dtype]
        lines = [
            f"device {self.device}, dtype {self.dtype}, {self.reps} timed pairs per config "
            f"(interleaved with {REFERENCE_LABEL}; candidate and reference each in a worker, sandbox "
            f"level {current_level()}, pinned to CPU {self.cpu}, timed by the evaluator around each request minus a "
            f"{self.noop_s * 1e6:.0f} us no-op round trip and the input copy), inputs derived from the "
            "run's secret and the candidate's files.",
            f"error budget {ERROR_BUDGET:g} on max |out - ref| / max |V| against a float64 NumPy "
            "reference, checked on every call including the timed ones.",
            f"streaming copy bandwidth (NumPy, read+write) {self.stream_gbs:.1f} GB/s; "
            "GB/s below counts K and V bytes read once.",
        ]
        for s in scores:
            nbytes = s.config.kv_elements() * itemsize
            cand_gbs, ref_gbs = nbytes / s.cand_s / 1e9, nbytes / s.ref_s / 1e9
            lines.append(
                f"  {s.config.name} [{s.config.describe()}]: {s.speedup:.3f}x SDPA (±{s.spread:.1%}), "
                f"error {s.worst_error:.2e} = {s.worst_error / ERROR_BUDGET:.2%} of budget, "
                f"{kernel.label} {s.cand_s * 1e3:.2f} ms = {cand_gbs:.2f} GB/s "
                f"({cand_gbs / self.stream_gbs:.0%} of streaming), SDPA {s.ref_s * 1e3:.2f} ms = {ref_gbs:.2f} GB/s"
            )
        return EvalResult(
            correct=True,
            metrics={s.config.name: s.speedup for s in scores},
            spread={s.config.name: s.spread for s in scores},
            notes="\n".join(lines),
        )


def evaluate_workdir(workdir: Path, options: EvalOptions) -> EvalResult:
    """Score the candidate in ``workdir``: a failed gate or a broken candidate gives
    ``correct=False`` with a message naming the config and the problem."""
    suite = Suite(options.quick, options, workdir)
    try:
        kernel = candidate_kernel(workdir)
        scores = suite.measure(kernel)
    except CandidateFailure as exc:
        return EvalResult(correct=False, metrics={}, error=str(exc),
                          notes=f"device {suite.device}, dtype {suite.dtype}")
    finally:
        suite.close()
    return suite.result(kernel, scores)
