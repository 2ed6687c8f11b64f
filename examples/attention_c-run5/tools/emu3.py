import numpy as np, sys
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parents[3] / 'avo-target-attention-c'))
from avo_target_attention_c.reference import make_inputs
from avo_target_attention_c.settings import GATE_SHAPES
exec(open(__import__('pathlib').Path(__file__).with_name('emu2.py')).read().split("rng=np.random")[0])
TP=[(0,0),(0,1),(1,0)]
for name,tq in [("6",[(0,0),(0,1),(1,0),(1,1),(0,2),(2,0)]),("5 -q2k0",[(0,0),(0,1),(1,0),(1,1),(0,2)]),("5 -q0k2",[(0,0),(0,1),(1,0),(1,1),(2,0)]),("4",[(0,0),(0,1),(1,0),(1,1)]),("3",[(0,0),(0,1),(1,0)])]:
    worst=0; where=None
    for i,sh in enumerate(GATE_SHAPES):
        q,k,v=make_inputs(1000+i, sh.heads, sh.n, 64, sh.logit_scale, sh.skewed)
        r=ref(q,k,v,sh.causal); e=(np.abs(attn(q,k,v,sh.causal,tq,TP)-r)/(1e-4+1e-4*np.abs(r))).max()
        if e>worst: worst=e; where=sh.label()
    print(name,"worst %.3f at %s"%(worst,where))
