"""The sandbox worker: the only process that loads and runs candidate code.

Started by :mod:`avo_target_attention_c.sandbox` as ``python -m avo_target_attention_c.worker
--fd N`` with the thread settings in its environment. It pins itself to the CPUs it was
given, caps BLAS with threadpoolctl, loads the kernel with cffi (ABI mode, see
:mod:`avo_target_attention_c.build`) and answers requests over a pipe. If the kernel
crashes or hangs, only this process dies; the evaluator reports which request it was.

The NumPy reference runs here too, interleaved with the kernel, so both sides of every
timing pair see the same process, the same CPU and the same moment of machine load.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

POISON = float("nan")  # out is filled with this before every candidate call
CANARY = -7777.0  # guard cells around out: a write past either end changes them
GUARD = 64


def _pin() -> None:
    cpus = os.environ.get("AVO_CPUS", "")
    if cpus:
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})


class Worker:
    """Request handlers. Every reply is ``("ok", payload)`` or ``("error", message)``."""

    def __init__(self, threads: int) -> None:
        import numpy as np
        from threadpoolctl import threadpool_info, threadpool_limits

        from avo_target_attention_c.reference import NumpyAttention

        self.np = np
        self.threads = threads
        self._limits = threadpool_limits(limits=threads)  # held for the worker's lifetime
        self.blas = [
            {"api": i.get("internal_api"), "threads": i.get("num_threads"), "arch": i.get("architecture")}
            for i in threadpool_info()
        ]
        self.reference = NumpyAttention()
        self.base_threads = _thread_count()  # before the kernel is loaded
        self.ffi: Any = None
        self.fn: Any = None
        self._lib: Any = None

    # -- requests --------------------------------------------------------------------------

    def load(self, library: str) -> dict[str, Any]:
        from cffi import FFI

        from avo_target_attention_c.build import PROTOTYPE, SYMBOL

        ffi = FFI()
        ffi.cdef(PROTOTYPE)
        try:
            lib = ffi.dlopen(library)
        except OSError as exc:
            raise RuntimeError(f"the compiled kernel cannot be loaded: {exc}") from None
        try:
            fn = getattr(lib, SYMBOL)
        except AttributeError:
            raise RuntimeError(f"kernel.c does not export a function named {SYMBOL!r}") from None
        self.ffi, self.fn, self._lib = ffi, fn, lib  # keep lib alive: it owns the mapping
        return {"blas": self.blas, "threads": self.threads, "cpus": sorted(os.sched_getaffinity(0)),
                "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}

    def _bind(self, who: str, q: Any, k: Any, v: Any, out: Any, causal: bool) -> Callable[[], None]:
        """A zero-argument call of the candidate with every conversion done up front."""
        heads, n, d = q.shape
        if who == "kernel":
            ffi, fn = self.ffi, self.fn
            pq, pk, pv = (ffi.from_buffer("float[]", a) for a in (q, k, v))
            po = ffi.from_buffer("float[]", out, require_writable=True)
            flag = 1 if causal else 0
            return lambda: fn(pq, pk, pv, po, heads, n, d, flag)
        if who == "torch":
            return _torch_call(q, k, v, out, causal, self.threads)
        if who == "numpy":
            return lambda: self.reference(q, k, v, out, causal)
        raise ValueError(f"unknown candidate {who!r}")

    def run(self, q: Any, k: Any, v: Any, causal: bool) -> dict[str, Any]:
        """One checked call: returns out, and whether the kernel wrote outside it or into its inputs."""
        np = self.np
        size = q.size
        buf = np.full(size + 2 * GUARD, CANARY, dtype=np.float32)
        buf[GUARD:GUARD + size] = POISON
        out = buf[GUARD:GUARD + size].reshape(q.shape)
        copies = [a.copy() for a in (q, k, v)]
        self._bind("kernel", q, k, v, out, causal)()
        overrun = bool((buf[:GUARD] != CANARY).any() or (buf[GUARD + size:] != CANARY).any())
        modified = [name for name, a, c in zip("qkv", (q, k, v), copies, strict=True)
                    if not np.array_equal(a, c, equal_nan=True)]
        return {"out": out.copy(), "overrun": overrun, "inputs_modified": modified}

    def bench(self, req: dict[str, Any]) -> dict[str, Any]:
        """Interleaved timing pairs (reference, candidate) on fresh inputs for every pair."""
        from avo_target_attention_c.reference import make_inputs

        np = self.np
        heads, n, d, causal = req["heads"], req["n"], req["d"], req["causal"]
        who, seed0, spot = req["who"], req["seed"], req["spot"]
        ref_out = np.empty((heads, n, d), dtype=np.float32)
        # Warm-up: page in both code paths and buffers once, untimed.
        q, k, v = make_inputs(seed0 - 1, heads, n, d)
        warm = np.empty_like(ref_out)
        self._bind("numpy", q, k, v, ref_out, causal)()
        self._bind(who, q, k, v, warm, causal)()
        pairs: list[dict[str, Any]] = []
        started = time.perf_counter()
        for r in range(req["max_pairs"]):
            q, k, v = make_inputs(seed0 + r, heads, n, d)
            out = np.full((heads, n, d), POISON, dtype=np.float32)
            ref_call = self._bind("numpy", q, k, v, ref_out, causal)
            cand_call = self._bind(who, q, k, v, out, causal)
            gc.disable()
            try:
                if r % 2 == 0:  # alternate the order so neither side always runs second
                    t_ref, c_ref = _timed(ref_call)
                    t_cand, c_cand = _timed(cand_call)
                else:
                    t_cand, c_cand = _timed(cand_call)
                    t_ref, c_ref = _timed(ref_call)
            finally:
                gc.enable()
            rng = np.random.default_rng(seed0 + r + 1_000_003)
            picks = [(0, 0), (heads - 1, n - 1)]  # the first and the very last row: the tails
            extra = zip(rng.integers(0, heads, spot), rng.integers(0, n, spot), strict=True)
            picks += [(int(h), int(i)) for h, i in extra]
            rows = np.stack([out[h, i] for h, i in picks])
            pairs.append({"seed": seed0 + r, "t_ref": t_ref, "t_cand": t_cand, "c_ref": c_ref, "c_cand": c_cand,
                          "nonfinite": int((~np.isfinite(out)).sum()), "picks": picks, "rows": rows})
            elapsed = time.perf_counter() - started
            if len(pairs) >= req["min_pairs"] and elapsed >= req["min_time"]:
                break
            if elapsed >= req["max_time"] and len(pairs) >= 3:
                break
        return {"pairs": pairs, "threads": _thread_count(), "base_threads": self.base_threads,
                "children": _child_count()}


def _thread_count() -> int:
    return len(os.listdir("/proc/self/task"))


def _child_count() -> int:
    total = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as fh:
                total += len(fh.read().split())
        except OSError:
            continue
    return total


def _timed(call: Callable[[], None]) -> tuple[float, float]:
    """Wall-clock and CPU seconds of one call on the calling thread.

    Thread CPU time, not process CPU time: under avo's RLIMIT_CPU the kernel keeps the
    process clock only to the scheduler tick (4 ms here; measured: every short call read
    0), while the thread clock stays exact. Work a kernel hands to other threads is not
    counted, which :func:`avo_target_attention_c.evaluate.choose_clock` detects.
    """
    c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
    call()
    t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
    return (t1 - t0) * 1e-9, (c1 - c0) * 1e-9


def _torch_call(q: Any, k: Any, v: Any, out: Any, causal: bool, threads: int) -> Callable[[], None]:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
    tout = torch.from_numpy(out)

    def call() -> None:
        with torch.inference_mode():
            tout.copy_(F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal))

    return call


def serve(conn: Connection, worker: Worker) -> None:
    """Answer requests until the parent closes the pipe."""
    handlers: dict[str, Callable[..., Any]] = {"load": worker.load, "run": worker.run, "bench": worker.bench}
    while True:
        try:
            kind, args = conn.recv()
        except EOFError:
            return
        if kind == "exit":
            return
        try:
            reply: tuple[str, Any] = ("ok", handlers[kind](*args))
        except Exception as exc:  # a Python-level failure (bad library, torch missing, ...)
            reply = ("error", f"{type(exc).__name__}: {exc}")
        conn.send(reply)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m avo_target_attention_c.worker")
    parser.add_argument("--fd", type=int, required=True)
    args = parser.parse_args(argv)
    threads = int(os.environ.get("AVO_THREADS", "1"))
    _pin()  # before NumPy starts any thread
    conn = Connection(args.fd)
    worker = Worker(threads)
    conn.send(("ok", "ready"))
    serve(conn, worker)
    return 0


if __name__ == "__main__":
    sys.exit(main())
