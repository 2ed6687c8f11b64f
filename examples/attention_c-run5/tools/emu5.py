import numpy as np, sys
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parents[3] / 'avo-target-attention-c'))
from avo_target_attention_c.reference import make_inputs
from avo_target_attention_c.settings import GATE_SHAPES
exec(open(__import__('pathlib').Path(__file__).with_name('emu2.py')).read().split("rng=np.random")[0])
TP=[(0,0),(0,1),(1,0)]
big=[sh for sh in GATE_SHAPES if sh.logit_scale>1 or sh.skewed or sh.n>1000]
for name,tq in [("6",[(0,0),(0,1),(1,0),(1,1),(0,2),(2,0)]),("5 -q0k2",[(0,0),(0,1),(1,0),(1,1),(2,0)]),("5 -q2k0",[(0,0),(0,1),(1,0),(1,1),(0,2)])]:
    ws=[]
    for seed in range(10):
        worst=0
        for i,sh in enumerate(big):
            q,k,v=make_inputs(seed*1000+i+7, sh.heads, sh.n, 64, sh.logit_scale, sh.skewed)
            r=ref(q,k,v,sh.causal); worst=max(worst,(np.abs(attn(q,k,v,sh.causal,tq,TP)-r)/(1e-4+1e-4*np.abs(r))).max())
        ws.append(worst)
    print(name," ".join("%.2f"%w for w in ws), "max %.2f"%max(ws))
