"""Worst gate error (fraction of the tolerance) of compiled kernels over the gate's 20 shapes, per seed.

    python accuracy.py ./a.so ./b.so      (a kernel built: gcc -O3 -march=native -pthread -shared -fPIC -o a.so kernel.c -lm)

The inputs are the target's own make_inputs (seeds 0-11 here, not the evaluator's secret ones).
"""
import ctypes, sys
import numpy as np
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parents[3] / 'avo-target-attention-c'))
from avo_target_attention_c.reference import make_inputs
from avo_target_attention_c.settings import GATE_SHAPES
fp = ctypes.POINTER(ctypes.c_float)
def ref(q, k, v, causal):
    q, k, v = (x.astype(np.float64) for x in (q, k, v)); s = q @ np.swapaxes(k, -1, -2) / 8
    n = q.shape[-2]
    if causal: s = s + np.triu(np.full((n, n), -np.inf), 1)
    s -= s.max(-1, keepdims=True); p = np.exp(s); return p @ v / p.sum(-1, keepdims=True)
libs = [(name, ctypes.CDLL(name)) for name in sys.argv[1:]]
for _, lib in libs: lib.attention.argtypes = [fp] * 4 + [ctypes.c_int] * 4
seeds = range(12)
for name, lib in libs:
    ws = []
    for seed in seeds:
        worst = 0
        for i, sh in enumerate(GATE_SHAPES):
            q, k, v = (np.ascontiguousarray(x, np.float32) for x in make_inputs(seed * 1000 + i + 7, sh.heads, sh.n, 64, sh.logit_scale, sh.skewed))
            out = np.empty_like(q)
            lib.attention(*(x.ctypes.data_as(fp) for x in (q, k, v, out)), sh.heads, sh.n, 64, int(sh.causal))
            r = ref(q, k, v, sh.causal)
            worst = max(worst, (np.abs(out - r) / (1e-4 + 1e-4 * np.abs(r))).max())
        ws.append(worst)
    print(name, " ".join("%.2f" % w for w in ws), "max %.2f" % max(ws))
