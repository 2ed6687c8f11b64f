"""Operator experiment: time the kernel through the target's own Worker, several ways."""
import statistics, sys, tempfile
from pathlib import Path
import numpy as np
from avo_target_attention_c import evaluate as E
from avo_target_attention_c.build import compile_kernel
from avo_target_attention_c.reference import make_inputs
from avo_target_attention_c.sandbox import Worker
from avo_target_attention_c.settings import plan

kdir = Path(sys.argv[1]); heads, n, causal = int(sys.argv[2]), int(sys.argv[3]), bool(int(sys.argv[4]))
p = plan(False)
with tempfile.TemporaryDirectory() as tmp:
    b = compile_kernel(kdir, Path(tmp) / "build")
    with E.judge(1) as jd, Worker(Path(tmp) / "sb", 1, E.max_floats(p), readable=(b.library.parent,)) as box:
        box.request({"op": "load", "library": str(b.library), "cdef": E.PROTOTYPE, "symbol": E.SYMBOL}, 60, "load")
        ref_out = np.empty((heads, n, 64), np.float32)
        def call():
            c = E._call(box, "kernel", heads, n, causal, 30, "x"); return E._candidate_time(box, c, 1)
        q, k, v = make_inputs(1, heads, n, 64); box.put(q, k, v); call()
        res = {}
        for mode in ["same inputs, back to back", "fresh inputs (put)", "fresh inputs + reference before", "same inputs + reference before", "evaluator order (alternating)"]:
            ts = []
            for r in range(40):
                if "fresh" in mode or "alternating" in mode:
                    q, k, v = make_inputs(100 + r, heads, n, 64); box.put(q, k, v)
                if "reference before" in mode or ("alternating" in mode and r % 2 == 0):
                    jd.time_reference(q, k, v, ref_out, causal)
                ts.append(call())
                if "alternating" in mode and r % 2 == 1:
                    jd.time_reference(q, k, v, ref_out, causal)
            print(f"{mode:40s} median {statistics.median(ts)*1e3:.3f} ms  min {min(ts)*1e3:.3f}")
