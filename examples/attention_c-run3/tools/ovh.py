"""Operator experiment: the worker's CPU per request for noop, a tiny call (n=1), and a 256c call, vs the kernel's own
inner CPU time (D kernel prints INNER to stderr)."""
import statistics, sys, tempfile
from pathlib import Path
from avo_target_attention_c import evaluate as E
from avo_target_attention_c.build import compile_kernel
from avo_target_attention_c.reference import make_inputs
from avo_target_attention_c.sandbox import Worker
from avo_target_attention_c.settings import plan
kdir = Path(sys.argv[1]); p = plan(False)
with tempfile.TemporaryDirectory() as tmp:
    b = compile_kernel(kdir, Path(tmp) / "build")
    with E.judge(1) as jd, Worker(Path(tmp) / "sb", 1, E.max_floats(p), readable=(b.library.parent,)) as box:
        box.request({"op": "load", "library": str(b.library), "cdef": E.PROTOTYPE, "symbol": E.SYMBOL}, 60, "load")
        print("noop (subtracted):", box.noop.cpu * 1e6, "us")
        for heads, n, c in [(1, 1, 0), (1, 16, 0), (8, 256, 1), (8, 256, 0)]:
            q, k, v = make_inputs(1, heads, n, 64); box.put(q, k, v)
            ts = []
            for r in range(60):
                cost = E._call(box, "kernel", heads, n, c, 30, "x"); ts.append(cost.cpu)
            print(f"h={heads} n={n} c={c}: worker CPU per call median {statistics.median(ts)*1e6:.0f} us min {min(ts)*1e6:.0f}", flush=True)
