"""2-thread vs 1-thread kernel GFLOP/s, per config, for pairs of evaluation logs (1-thread log, 2-thread log)."""
import math, re, sys
run = sys.argv[1]
order = ["n256_noncausal", "n256_causal", "n512_noncausal", "n512_causal", "n1024_noncausal", "n1024_causal",
         "n2048_noncausal", "n2048_causal"]
def gf(name):
    import glob
    path = glob.glob(f"{run}/logs/*-{name}.log")[0]
    txt = open(path, errors="replace").read().replace("\\n", "\n")
    out = {}
    for k in order:
        r = re.search(k + r" +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +\d+ +([\d.]+)% +(\d+)%", txt)
        out[k] = (float(r.group(4)), float(r.group(3)), float(r.group(5)))
    return out
for a, b in zip(sys.argv[2::2], sys.argv[3::2]):
    g1, g2 = gf(a), gf(b)
    rat = [g2[k][0] / g1[k][0] for k in order]
    nrat = [g1[k][1] / g2[k][1] for k in order]  # numpy 1-thread ms / 2-thread ms
    print(f"{a} -> {b}: kernel 2t GFLOP/s {' '.join(f'{g2[k][0]:.0f}' for k in order)}; vs 1t "
          f"{' '.join(f'{r:.2f}' for r in rat)} (gm {math.exp(sum(map(math.log, rat))/8):.2f}x); numpy 2t/1t speed "
          f"{' '.join(f'{r:.2f}' for r in nrat)}; 2t iqr {' '.join(f'{g2[k][2]:.0f}' for k in order)} %")
