"""Operator A/B through the target's own sandboxed Worker, for the current evaluator (round four):
kernels A and B (folders with kernel.c + cflags.txt) timed alternately, the NumPy reference between
calls as in the evaluator's pairs, fresh inputs each call, a no-op in a kernel-free twin worker after
every call (subtracted as the evaluator does). Prints per config the medians of the candidate's time
(CPU at 1 thread, wall with more), its raw wall and process CPU, the no-op, and t_A/t_B.
    AVO_ATTENTION_C_THREADS=2 python abw2.py DIR_A DIR_B [cfg ...]     cfg like 256n 2048c
"""
import math, os, statistics, sys, tempfile
from pathlib import Path
import numpy as np
from avo_target_attention_c import evaluate as E
from avo_target_attention_c.build import compile_kernel
from avo_target_attention_c.reference import make_inputs, flops
from avo_target_attention_c.sandbox import Worker
from avo_target_attention_c.settings import plan

da, db = Path(sys.argv[1]), Path(sys.argv[2])
cfgs = sys.argv[3:] or ["256n", "256c", "512n", "512c", "1024n", "1024c", "2048n", "2048c"]
heads_of = {256: 8, 512: 4, 1024: 2, 2048: 1}
p = plan(False); T = p.threads
with tempfile.TemporaryDirectory() as tmp:
    ba = compile_kernel(da, Path(tmp) / "ba"); bb = compile_kernel(db, Path(tmp) / "bb")
    with E.judge(T) as jd, Worker(Path(tmp) / "tw", T, 1, candidate=False) as tw, \
            Worker(Path(tmp) / "sa", T, E.max_floats(p), readable=(ba.library.parent,)) as A, \
            Worker(Path(tmp) / "sb", T, E.max_floats(p), readable=(bb.library.parent,)) as B:
        for box, b in ((A, ba), (B, bb)):
            box.request({"op": "load", "library": str(b.library), "cdef": E.PROTOTYPE, "symbol": E.SYMBOL}, 60, "load")
        logs = []
        for cfg in cfgs:
            n = int(cfg[:-1]); c = cfg[-1] == "c"; h = heads_of[n]
            ref_out = np.empty((h, n, 64), np.float32)
            def call(box):
                cost = E._call(box, "kernel", h, n, c, 30, "x"); nop = tw.request({"op": "noop"}, 10.0, "noop")
                return cost, nop
            reps = max(12, int(64 * 256 / n)); ra, rb, na = [], [], []
            for it in range(reps):
                q, k, v = make_inputs(1000 + it, h, n, 64)
                A.put(q, k, v); B.put(q, k, v)
                if it % 2 == 0:
                    jd.time_reference(q, k, v, ref_out, c); a = call(A); jd.time_reference(q, k, v, ref_out, c); b = call(B)
                else:
                    b = call(B); jd.time_reference(q, k, v, ref_out, c); a = call(A); jd.time_reference(q, k, v, ref_out, c)
                if it >= 2:
                    ra.append(a); rb.append(b)
            noop = statistics.median([x[1].wall if T > 1 else x[1].cpu for x in ra + rb])
            def st(rs):
                t = statistics.median([(x[0].wall if T > 1 else x[0].cpu) - noop for x in rs])
                return t, statistics.median([x[0].wall for x in rs]), statistics.median([x[0].cpu for x in rs])
            (ta, wa, ca), (tb, wb, cb) = st(ra), st(rb)
            m = ta / tb; logs.append(math.log(m)); fl = flops(h, n, 64, c)
            print(f"{cfg:6s} t_A/t_B {m:.3f}  A {ta*1e3:.3f} ms {fl/ta*1e-9:6.1f} GF/s (wall {wa*1e3:.3f} cpu {ca*1e3:.3f})  "
                  f"B {tb*1e3:.3f} ms {fl/tb*1e-9:6.1f} GF/s (wall {wb*1e3:.3f} cpu {cb*1e3:.3f})  noop {noop*1e6:.0f} us", flush=True)
        print(f"geomean t_A/t_B {math.exp(sum(logs)/len(logs)):.3f}  threads {T}  load {open('/proc/loadavg').read().split()[0]}  steal {open('/proc/stat').readline().split()[8]}")
