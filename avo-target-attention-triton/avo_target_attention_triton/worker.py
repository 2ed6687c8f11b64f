"""The sandbox worker: the only process that imports and runs a candidate's attention.py.

The evaluator copies this file into a fresh scratch folder and starts it inside avo's
sandbox (``python -I worker.py --fd N --device cuda|cpu``), once for the candidate and once
for the baseline, so the candidate never shares a process (or a CUDA context) with the
baseline or the float32 reference. It only needs the standard library and torch.

Protocol, over the inherited socket: every request is one JSON frame; every reply is one
JSON frame, followed by one raw frame when the header says ``"nbytes"``. No pickle crosses
the boundary: the evaluator parses only JSON and raw bf16 bytes, with sizes it expects.

Inputs are made here from a seed the evaluator sends (:func:`make_inputs`), and the
evaluator rebuilds the same tensors from the same seed to check the results, so tensors
only ever travel one way (outputs back, for checking).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import sys
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

MAX_REQUEST = 1 << 20


def make_inputs(seed: int, batch: int, heads_q: int, heads_kv: int, n: int, d: int,
                device: str) -> tuple[Any, Any, Any]:
    """q (batch, heads_q, n, d), k and v (batch, heads_kv, n, d), bf16, N(0, 1), from ``seed``.

    The same seed gives the same tensors in every process on the same device (torch's
    generator is deterministic), which is how the evaluator checks a worker's output.
    """
    import torch

    g = torch.Generator(device=device)
    g.manual_seed(seed)
    q = torch.randn((batch, heads_q, n, d), generator=g, device=device, dtype=torch.float32)
    k = torch.randn((batch, heads_kv, n, d), generator=g, device=device, dtype=torch.float32)
    v = torch.randn((batch, heads_kv, n, d), generator=g, device=device, dtype=torch.float32)
    return q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16)


def tensor_bytes(t: Any) -> bytes:
    """The raw bytes of a tensor (copied to the CPU, contiguous), without numpy."""
    c = t.detach().to("cpu").contiguous()
    return ctypes.string_at(c.data_ptr(), c.numel() * c.element_size())


class Worker:
    """Loads one attention module and answers requests."""

    def __init__(self, device: str) -> None:
        import torch

        self.torch = torch
        self.device = device
        self.cuda = device == "cuda"
        self.fn: Any = None
        self.last: Any = None
        self.flush_buf: Any = None
        if not self.cuda:
            # CPU time of one thread is steady on a loaded machine where wall-clock is not.
            torch.set_num_threads(1)
        if self.cuda:
            props = torch.cuda.get_device_properties(0)
            l2 = int(getattr(props, "L2_cache_size", 0) or 0) or (64 << 20)
            # Writing 4x the L2 before each timed call evicts whatever the last call left there.
            self.flush_buf = torch.empty(max(4 * l2, 256 << 20), dtype=torch.uint8, device="cuda")

    def info(self) -> dict[str, Any]:
        import os

        torch = self.torch
        info: dict[str, Any] = {"torch": torch.__version__, "device": self.device,
                                "interpret": os.environ.get("TRITON_INTERPRET") == "1"}
        try:
            import triton

            info["triton"] = triton.__version__
        except Exception as exc:  # reported, not fatal: a baseline does not need Triton
            info["triton"] = f"not importable ({type(exc).__name__})"
        if self.cuda:
            props = torch.cuda.get_device_properties(0)
            info.update(name=props.name, capability=list(torch.cuda.get_device_capability(0)),
                        sms=props.multi_processor_count)
        return info

    def load(self, path: str) -> dict[str, Any]:
        spec = importlib.util.spec_from_file_location("attention", path)
        if spec is None or spec.loader is None:
            raise RuntimeError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules["attention"] = module
        spec.loader.exec_module(module)
        fn = getattr(module, "attention", None)
        if not callable(fn):
            raise RuntimeError("attention.py defines no function attention(q, k, v, causal, scale)")
        self.fn = fn
        return self.info()

    def _inputs(self, req: dict[str, Any]) -> tuple[Any, Any, Any]:
        return make_inputs(int(req["seed"]), int(req["batch"]), int(req["heads_q"]), int(req["heads_kv"]),
                           int(req["n"]), int(req["d"]), self.device)

    def _call(self, q: Any, k: Any, v: Any, req: dict[str, Any]) -> Any:
        out = self.fn(q, k, v, bool(req["causal"]), float(req["scale"]))
        torch = self.torch
        if type(out) is not torch.Tensor:  # exactly: a subclass could compute lazily when read
            raise RuntimeError(f"attention() returned {type(out).__name__}, not a torch.Tensor")
        if tuple(out.shape) != tuple(q.shape) or out.dtype != torch.bfloat16 or out.device.type != q.device.type:
            raise RuntimeError(f"attention() returned a {out.dtype} tensor of shape {tuple(out.shape)} on "
                               f"{out.device}; expected bfloat16 {tuple(q.shape)} on {q.device}")
        return out

    def run(self, req: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        """One untimed call; the whole output goes back."""
        q, k, v = self._inputs(req)
        copies = [t.clone() for t in (q, k, v)]
        out = self._call(q, k, v, req)
        if self.cuda:
            self.torch.cuda.synchronize()
        modified = [n for n, t, c in zip("qkv", (q, k, v), copies, strict=True) if not self.torch.equal(t, c)]
        data = tensor_bytes(out)
        return {"inputs_modified": modified, "nbytes": len(data)}, data

    def time(self, req: dict[str, Any]) -> dict[str, Any]:
        """One timed call on fresh inputs after an L2 flush; the output is kept for ``rows``."""
        torch = self.torch
        q, k, v = self._inputs(req)
        self.last = None
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            self.flush_buf.zero_()
            start.record()
            out = self._call(q, k, v, req)
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) * 1e-3
        else:  # one torch thread (set at start), so this thread's CPU time is the whole call's
            t0 = time.thread_time()
            out = self._call(q, k, v, req)
            seconds = time.thread_time() - t0
        self.last = out
        return {"t": seconds}

    def rows(self, req: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        """Rows (batch, head, query) of the last timed output, or all of it."""
        if self.last is None:
            raise RuntimeError("no timed output to read")
        if req.get("full"):
            data = tensor_bytes(self.last)
        else:
            picks = req["picks"]
            torch = self.torch
            idx = torch.tensor(picks, dtype=torch.long, device=self.last.device)
            data = tensor_bytes(self.last[idx[:, 0], idx[:, 1], idx[:, 2]])
        return {"nbytes": len(data)}, data


def serve(conn: Connection, worker: Worker) -> None:
    """Answer requests until told to exit or the evaluator goes away."""
    while True:
        try:
            req = json.loads(conn.recv_bytes(MAX_REQUEST))
        except EOFError:
            return
        op = req.get("op")
        if op == "exit":
            return
        payload: bytes | None = None
        try:
            if op == "load":
                header = worker.load(req["path"])
            elif op == "run":
                header, payload = worker.run(req)
            elif op == "time":
                header = worker.time(req)
            elif op == "rows":
                header, payload = worker.rows(req)
            else:
                raise RuntimeError(f"unknown request {op!r}")
            header["ok"] = True
        except Exception as exc:  # the candidate's failure, reported by name with its last frame
            tb = traceback.extract_tb(exc.__traceback__)
            where = next((f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno}" for f in reversed(tb)
                          if f.filename.endswith("attention.py")), "")
            print(traceback.format_exc(), file=sys.stderr, flush=True)
            text = f"{type(exc).__name__}: {exc}".strip()
            header, payload = {"ok": False, "error": text[:2000] + (f" (at {where})" if where else "")}, None
        conn.send_bytes(json.dumps(header).encode())
        if payload is not None:
            conn.send_bytes(payload)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--device", choices=("cuda", "cpu"), required=True)
    args = parser.parse_args(argv)
    conn = Connection(args.fd)
    try:
        worker = Worker(args.device)
        header: dict[str, Any] = {"ok": True}
    except Exception as exc:
        header = {"ok": False, "error": f"the worker cannot start: {type(exc).__name__}: {exc}"}
    conn.send_bytes(json.dumps(header).encode())
    if header["ok"]:
        serve(conn, worker)
    return 0


if __name__ == "__main__":
    sys.exit(main())
