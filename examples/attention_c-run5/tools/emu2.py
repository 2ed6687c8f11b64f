import numpy as np, itertools
def bf16(x):
    x = np.asarray(x, np.float32); u = x.view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)
def split(x, k, trunc=False):
    parts=[]; r=x.astype(np.float32)
    for i in range(k):
        h=(r.view(np.uint32)&np.uint32(0xFFFF0000)).view(np.float32) if (trunc and i==0) else bf16(r)
        parts.append(h); r=(r-h).astype(np.float32)
    return parts
def mm(A,B,terms):
    out=np.zeros(A[0].shape[:-1]+(B[0].shape[-1],),np.float32)
    for i,j in terms: out=(out+(A[i].astype(np.float64)@B[j].astype(np.float64)).astype(np.float32)).astype(np.float32)
    return out
def attn(q,k,v,causal,tq,tp):
    sc=np.float32(1.4426950408889634/8)
    s=mm(split(q,3),split(np.swapaxes(k*sc,-1,-2),3),tq)
    n=q.shape[-2]
    if causal: s=s+np.triu(np.full((n,n),-np.inf,np.float32),1)
    s=s-s.max(-1,keepdims=True); p=np.exp2(s).astype(np.float32); l=p.sum(-1,keepdims=True)
    return mm(split(p,2,True),split(v,2),tp)/l
def ref(q,k,v,causal):
    q,k,v=(x.astype(np.float64) for x in (q,k,v)); s=q@np.swapaxes(k,-1,-2)/8
    n=q.shape[-2]
    if causal: s=s+np.triu(np.full((n,n),-np.inf),1)
    s-=s.max(-1,keepdims=True); p=np.exp(s); return p@v/p.sum(-1,keepdims=True)
rng=np.random.default_rng(0)
TP=[(0,0),(0,1),(1,0)]
cases=[]
for n,sc,causal,skew in [(255,5,0,0),(257,5,1,0),(128,1,0,0),(300,1,1,1),(512,5,0,1),(64,5,1,0)]:
    q,k,v=rng.standard_normal((3,1,n,64)).astype(np.float32); q*=sc
    if skew: v=v*np.float32(100)+np.float32(50); k[:, :, :8]*=10
    cases.append((q,k,v,causal))
for name,tq in [("6",[(0,0),(0,1),(1,0),(1,1),(0,2),(2,0)]),("5 -q2k0",[(0,0),(0,1),(1,0),(1,1),(0,2)]),("5 -q1k1",[(0,0),(0,1),(1,0),(0,2),(2,0)]),("4",[(0,0),(0,1),(1,0),(1,1)]),("3",[(0,0),(0,1),(1,0)])]:
    worst=0
    for q,k,v,causal in cases:
        r=ref(q,k,v,causal); e=np.abs(attn(q,k,v,causal,tq,TP)-r)/(1e-4+1e-4*np.abs(r)); worst=max(worst,e.max())
    print(name,"worst %.3f"%worst)
