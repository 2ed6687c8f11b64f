"""The sandbox worker: the only process that loads and runs candidate code.

A standalone script (standard library and cffi only; torch when the baseline asks for it):
the evaluator copies it into a fresh scratch folder per evaluation and starts it inside the
sandbox, where this package itself is hidden, as

    python -I worker.py SOCKET_FD SHM_FD MAX_FLOATS GUARD THREADS

The shared-memory file ``SHM_FD`` holds q, k, v (``MAX_FLOATS`` float32 each) and out (with
``GUARD`` floats on either side). The evaluator writes the inputs and poisons out, sends one
JSON line per request on the socket (timed calls: four int32 each, to the request loop in C that
the ``serve`` request starts), and reads the answer and out back itself. This process
holds no clock, no reference and no secret: its replies only say "done" (or why not), and
everything it could forge (timing, checks, which rows are looked at) lives outside it.
"""

import json
import mmap
import sys


def main(argv: list[str]) -> int:
    import socket

    sock_fd, shm_fd, max_floats, guard, threads = (int(a) for a in argv[1:6])
    sock = socket.socket(fileno=sock_fd)
    reader = sock.makefile("rb")
    mem = mmap.mmap(shm_fd, (4 * max_floats + 2 * guard) * 4)
    offsets = (0, max_floats, 2 * max_floats, 3 * max_floats + guard)  # q, k, v, out (floats)
    state: dict = {}

    def send(obj: dict) -> None:
        sock.sendall((json.dumps(obj) + "\n").encode())

    send({"ready": True})
    for line in reader:
        req = json.loads(line)
        op = req.get("op")
        try:
            if op == "noop":
                pass
            elif op == "load":
                load(state, mem, offsets, req)
            elif op == "call":
                fn, ptrs = state["fn"], state["ptrs"]
                fn(*ptrs, req["heads"], req["n"], req["d"], 1 if req["causal"] else 0)
            elif op == "serve":  # timed calls: the request loop in C until a stop request
                if state["serve"].avo_serve(sock.fileno(), state["ffi"].cast("void *", state["fn"]), *state["ptrs"]):
                    return 0  # the socket is gone
            elif op == "torch":
                torch_call(state, mem, offsets, threads, req)
            else:
                raise ValueError(f"unknown request {op!r}")
        except Exception as exc:  # a Python-level failure (bad library, torch missing, ...)
            send({"error": f"{type(exc).__name__}: {exc}"})
            continue
        send({"ok": True})
    return 0


def load(state: dict, mem: mmap.mmap, offsets: tuple, req: dict) -> None:
    from cffi import FFI

    ffi = FFI()
    ffi.cdef(req["cdef"])
    ffi.cdef(req["serve_cdef"])
    serve = ffi.dlopen(req["serve"])  # ours, before the kernel's constructors run
    try:
        lib = ffi.dlopen(req["library"])
    except OSError as exc:
        raise RuntimeError(f"the compiled kernel cannot be loaded: {exc}") from None
    try:
        fn = getattr(lib, req["symbol"])
    except AttributeError:
        raise RuntimeError(f"kernel.c does not export a function named {req['symbol']!r}") from None
    buf = ffi.from_buffer("float[]", mem, require_writable=True)
    # lib owns the mapping of the library and buf the view of the shared memory: keep both.
    state.update(ffi=ffi, lib=lib, serve=serve, buf=buf, fn=fn, ptrs=[buf + off for off in offsets])


def torch_call(state: dict, mem: mmap.mmap, offsets: tuple, threads: int, req: dict) -> None:
    import numpy as np
    import torch
    import torch.nn.functional as F

    if "torch" not in state:
        torch.set_num_threads(threads)
        state["torch"] = np.frombuffer(mem, dtype=np.float32)
    flat = state["torch"]
    shape = (req["heads"], req["n"], req["d"])
    size = shape[0] * shape[1] * shape[2]
    q, k, v, out = (torch.from_numpy(flat[o:o + size].reshape(shape)) for o in offsets)
    with torch.inference_mode():
        out.copy_(F.scaled_dot_product_attention(q, k, v, is_causal=bool(req["causal"])))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
