"""Operator experiment: what a request costs the worker (its process CPU clock, read by the evaluator), by kind:
noop / call of a trivial kernel, with or without the evaluator's audit between requests."""
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
        print(f"noop at start (subtracted): {box.noop.cpu * 1e6:.0f} us")
        q, k, v = make_inputs(1, 1, 1, 64); box.put(q, k, v)
        for label, req, audit in [("noop", {"op": "noop"}, False), ("noop + audit", {"op": "noop"}, True),
                                  ("call n=1", {"op": "call", "heads": 1, "n": 1, "d": 64, "causal": False}, False),
                                  ("call n=1 + audit", {"op": "call", "heads": 1, "n": 1, "d": 64, "causal": False}, True),
                                  ("noop", {"op": "noop"}, False)]:
            ts = []
            for r in range(80):
                c = box.request(req, 10, "x")
                if audit: box.audit("x", c)
                ts.append(c.cpu)
            print(f"{label:20s} worker CPU median {statistics.median(ts)*1e6:5.0f} us  min {min(ts)*1e6:5.0f}", flush=True)
