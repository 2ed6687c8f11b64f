"""The sandbox worker: the only process that imports and runs a candidate's attention.py.

Copied into a fresh scratch folder per evaluation and started inside avo's sandbox as
``python -I worker.py``; it imports nothing of avo or of this package (both are hidden
inside the sandbox). Nothing here is trusted: the candidate shares this process and may
rewrite any of it. The evaluator therefore keeps the clock, the references and every
check on its side; this file only moves arrays between shared memory and the candidate.

Protocol: one JSON object per line on stdin, one reply per line on the original stdout
(fd 1 is pointed at stderr before the candidate is imported, so its prints are only a log).
"""

import importlib.util
import json
import os
import sys
import time
import traceback
from typing import Any

Msg = dict[str, Any]


def _tail(text: str, lines: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


class Worker:
    def __init__(self) -> None:
        self.fn: Any = None
        self.mx: Any = None
        self.np: Any = None
        self.dtype: Any = None
        self.cfg: Any = None

    def init(self, msg: Msg) -> Msg:
        import mlx.core as mx
        import numpy as np

        self.np, self.mx = np, mx
        device = mx.default_device()
        on_gpu = device.type == mx.gpu
        backend = "cpu"
        if on_gpu:
            backend = "metal" if mx.metal.is_available() else "cuda"
        dtype = msg.get("dtype") or ("float16" if on_gpu else "float32")
        self.dtype = getattr(mx, dtype)
        path = os.path.join(msg["dir"], "attention.py")
        if not os.path.isfile(path):
            return {"ok": False, "error": "attention.py not found in the candidate directory"}
        sys.path.insert(0, msg["dir"])  # the candidate may import its own helper modules
        spec = importlib.util.spec_from_file_location("avo_candidate_attention", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except BaseException as exc:  # SystemExit included: it is the candidate's failure
            return {"ok": False, "error": f"attention.py raised at import: {type(exc).__name__}: {exc}\n"
                                          f"{_tail(traceback.format_exc())}"}
        fn = getattr(module, "decode_attention", None)
        if not callable(fn):
            return {"ok": False, "error": "attention.py defines no function decode_attention(q, k, v, scale)"}
        self.fn = fn
        return {"ok": True, "dtype": dtype,
                "device": f"{device} ({backend}, mlx {getattr(mx, '__version__', '?')})"}

    def config(self, msg: Msg) -> Msg:
        np = self.np
        b, hq, hkv, length, d = msg["shape"]
        mm = np.memmap(msg["inputs"], dtype=np.float32, mode="r")
        nq, nkv = b * hq * d, b * hkv * length * d
        self.cfg = {
            "q": mm[:nq].reshape(b, hq, 1, d),
            "k": mm[nq:nq + nkv].reshape(b, hkv, length, d),
            "v": mm[nq + nkv:nq + 2 * nkv].reshape(b, hkv, length, d),
            "out": np.memmap(msg["out"], dtype=np.float32, mode="r+", shape=(b, hq, 1, d)),
            "scale": float(msg["scale"]),
            "shape": (b, hq, 1, d),
        }
        return {"ok": True}

    def call(self, msg: Msg) -> Msg:
        mx, c = self.mx, self.cfg
        t0 = time.perf_counter()
        q = mx.array(c["q"]).astype(self.dtype)
        k = mx.array(c["k"]).astype(self.dtype)
        v = mx.array(c["v"]).astype(self.dtype)
        mx.eval(q, k, v)
        copy_s = time.perf_counter() - t0
        try:
            out = self.fn(q, k, v, c["scale"])
            if not isinstance(out, mx.array):
                return {"ok": False, "error": f"returned {type(out).__name__}, expected an mlx.core.array"}
            mx.eval(out)
        except Exception as exc:
            return {"ok": False, "error": f"raised {type(exc).__name__}: {exc}\n{_tail(traceback.format_exc())}"}
        if tuple(out.shape) != c["shape"]:
            return {"ok": False, "error": f"returned shape {tuple(out.shape)}, expected {c['shape']} "
                                          "(q is [B, Hq, 1, D])"}
        self.np.copyto(c["out"], self.np.asarray(out.astype(mx.float32)))
        return {"ok": True, "copy_s": copy_s}

    def ping(self, msg: Msg) -> Msg:
        return {"ok": True}


def main() -> None:
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the candidate's prints go to the log, never onto the channel
    sys.stdout = sys.stderr
    worker = Worker()
    for line in sys.stdin:
        msg = json.loads(line)
        reply = getattr(worker, msg["op"])(msg)
        channel.write(json.dumps(reply) + "\n")
    os._exit(0)


if __name__ == "__main__":
    main()
