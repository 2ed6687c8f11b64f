# Operator experiment: right after a 2-thread OpenBLAS call, the kernel (AVO_THREADS=2) runs ~2x slower:
# OpenBLAS keeps its worker thread spinning. `OPENBLAS_THREAD_TIMEOUT=4 python spin.py 256 8` removes it.
# Needs k.so (the kernel built as a shared library) in the current folder.
import ctypes, os, sys, time
os.environ["OPENBLAS_NUM_THREADS"] = "2"; os.environ["AVO_THREADS"] = "2"
import numpy as np
lib = ctypes.CDLL("./k.so"); fp = ctypes.POINTER(ctypes.c_float)
lib.attention.argtypes = [fp]*4 + [ctypes.c_int]*4
P = lambda a: a.ctypes.data_as(fp)
n, h = int(sys.argv[1]), int(sys.argv[2])
q, k, v = np.random.default_rng(0).standard_normal((3, h, n, 64), dtype=np.float32); o = np.empty_like(q)
A = np.random.rand(h, n, n).astype(np.float32)
def kern():
    t = time.perf_counter(); lib.attention(P(q), P(k), P(v), P(o), h, n, 64, 0); return time.perf_counter() - t
for label, pre in [("after sleep", lambda: time.sleep(0.3)), ("right after a 2-thread BLAS call", lambda: np.matmul(q, k.transpose(0, 2, 1), out=A))]:
    ts = []
    for _ in range(15):
        pre(); ts.append(kern())
    print(f"{label:35s} median {np.median(ts)*1e3:.3f} ms")
