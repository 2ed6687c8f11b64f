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
import platform
import struct
import sys

# System calls candidate code is refused (EPERM), by a seccomp filter set before the kernel's
# library is loaded (its constructors run under it). Each makes kernel objects that do work in
# interrupt context later: interrupt time is charged to whichever thread is on the CPU then
# (a kernel without CONFIG_IRQ_TIME_ACCOUNTING), which is the NumPy reference, timed on the same
# CPU. Round seven of the red team armed one-shot timerfds, each watched 2,500 times through
# epoll, to fire while NumPy ran: 9.5-10.8 for run six's v2, which honestly scores 6.5. None of
# these has a use in a function that computes attention. Numbers per architecture.
DENIED = {
    "x86_64": (0xC000003E, {
        "timer_create": 222, "timer_settime": 223, "timerfd_create": 283, "timerfd_settime": 286,
        "epoll_create": 213, "epoll_create1": 291, "epoll_ctl": 233, "io_setup": 206, "io_submit": 209,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "socket": 41, "socketpair": 53,
        "perf_event_open": 298, "inotify_init": 253, "inotify_init1": 294, "fanotify_init": 300,
        "userfaultfd": 323, "bpf": 321, "unshare": 272, "setns": 308}),
    "aarch64": (0xC00000B7, {
        "timer_create": 107, "timer_settime": 110, "timerfd_create": 85, "timerfd_settime": 86,
        "epoll_create1": 20, "epoll_ctl": 21, "io_setup": 0, "io_submit": 2,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "socket": 198, "socketpair": 199,
        "perf_event_open": 241, "inotify_init1": 26, "fanotify_init": 262,
        "userfaultfd": 282, "bpf": 280, "unshare": 97, "setns": 268}),
}


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
    forbid_interrupt_work()
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


def forbid_interrupt_work() -> None:
    """Refuse :data:`DENIED` to this process from now on (a seccomp filter: EPERM), where the
    kernel allows it; elsewhere (not Linux, another architecture) nothing is refused."""
    import ctypes

    arch = DENIED.get(platform.machine())
    if arch is None or not sys.platform.startswith("linux"):
        return
    audit, numbers = arch
    nrs = sorted(set(numbers.values()))

    def op(code: int, jt: int, jf: int, k: int) -> bytes:
        return struct.pack("HBBI", code, jt, jf, k)

    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, eperm = 0x7FFF0000, 0x00050000 | 1
    # Any other calling convention is refused whole (x86-64's `int $0x80` reaches the 32-bit table,
    # where timerfd_create is 322, not 283), and so are x32 system calls (numbered from bit 30).
    prog = [op(ld, 0, 0, 4), op(jeq, 1, 0, audit), op(ret, 0, 0, eperm), op(ld, 0, 0, 0),
            op(jge, len(nrs) + 1, 0, 0x40000000)]
    prog += [op(jeq, len(nrs) - i, 0, nr) for i, nr in enumerate(nrs)]
    prog += [op(ret, 0, 0, allow), op(ret, 0, 0, eperm)]
    code = b"".join(prog)
    filt = ctypes.create_string_buffer(code)
    fprog = struct.pack("HxxxxxxQ", len(prog), ctypes.addressof(filt))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(38, 1, None, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: required for an unprivileged filter
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    holder = ctypes.create_string_buffer(fprog)
    if libc.prctl(22, 2, ctypes.addressof(holder), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "seccomp could not be set: the kernel's system calls cannot be limited")


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
