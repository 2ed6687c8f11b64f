"""Operator A/B through the target's own sandboxed Worker (same process layout and clock as the
evaluator): kernels A and B (folders with kernel.c + cflags.txt) timed alternately, the NumPy
reference run between calls as in the evaluator's pairs, fresh inputs each call.

    python abw.py DIR_A DIR_B [cfg ...]      cfg like 256n 2048c; prints t_A/t_B (>1: B faster)
Threads: AVO_ATTENTION_C_THREADS (as the evaluator); 1 thread = process CPU time, else wall.
"""
import math, statistics, sys, tempfile
from pathlib import Path
from avo_target_attention_c import evaluate as E
from avo_target_attention_c.build import compile_kernel
from avo_target_attention_c.reference import make_inputs, flops
from avo_target_attention_c.sandbox import Worker
from avo_target_attention_c.settings import plan
from avo_target_attention_c.roofline import fma_roofline

da, db = Path(sys.argv[1]), Path(sys.argv[2])
cfgs = sys.argv[3:] or ["256n", "256c", "512n", "512c", "1024n", "1024c", "2048n", "2048c"]
heads_of = {256: 8, 512: 4, 1024: 2, 2048: 1}
p = plan(False); T = p.threads if hasattr(p, "threads") else 1
import os; T = int(os.environ.get("AVO_ATTENTION_C_THREADS", "1"))
with tempfile.TemporaryDirectory() as tmp:
    ba = compile_kernel(da, Path(tmp) / "ba"); bb = compile_kernel(db, Path(tmp) / "bb")
    with E.judge(T) as jd, Worker(Path(tmp) / "sa", T, E.max_floats(p), readable=(ba.library.parent,)) as A, \
            Worker(Path(tmp) / "sb", T, E.max_floats(p), readable=(bb.library.parent,)) as B:
        for box, b in ((A, ba), (B, bb)):
            box.request({"op": "load", "library": str(b.library), "cdef": E.PROTOTYPE, "symbol": E.SYMBOL}, 60, "load")
        roof = fma_roofline(T)
        logs = []
        for cfg in cfgs:
            n = int(cfg[:-1]); c = cfg[-1] == "c"; h = heads_of[n]
            import numpy as np
            ref_out = np.empty((h, n, 64), np.float32)
            def call(box):
                cost = E._call(box, "kernel", h, n, c, 30, "x"); return E._candidate_time(box, cost, T)
            reps = max(8, int(48 * 256 / n)); ta, tb, r = [], [], []
            for it in range(reps):
                q, k, v = make_inputs(1000 + it, h, n, 64)
                A.put(q, k, v); B.put(q, k, v)
                if it % 2 == 0:
                    jd.time_reference(q, k, v, ref_out, c); a = call(A); jd.time_reference(q, k, v, ref_out, c); b = call(B)
                else:
                    b = call(B); jd.time_reference(q, k, v, ref_out, c); a = call(A); jd.time_reference(q, k, v, ref_out, c)
                if it >= 2:
                    ta.append(a); tb.append(b); r.append(a / b)
            m = statistics.median(r); logs.append(math.log(m)); fl = flops(h, n, 64, c)
            ga, gb = fl / statistics.median(ta) * 1e-9, fl / statistics.median(tb) * 1e-9
            print(f"{cfg:6s} t_A/t_B {m:.3f}  A {statistics.median(ta)*1e3:.3f} ms {ga:6.1f} GF/s ({ga/roof:4.0%})  "
                  f"B {statistics.median(tb)*1e3:.3f} ms {gb:6.1f} GF/s ({gb/roof:4.0%})", flush=True)
        print(f"geomean t_A/t_B {math.exp(sum(logs)/len(logs)):.3f}   roof {roof:.0f} GF/s  threads {T}  load {open('/proc/loadavg').read().split()[0]}")
