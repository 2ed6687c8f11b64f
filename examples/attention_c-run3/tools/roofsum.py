"""Per evaluation: scalar, probe, roof per config (n256n..n2048c), roof geometric mean / min, kernel GFLOP/s."""
import json, math, os, re, sys
run = sys.argv[1]
traj = {d["log"]: d for d in (json.loads(l) for l in open(f"{run}/trajectory.jsonl")) if d.get("log")}
order = ["n256_noncausal", "n256_causal", "n512_noncausal", "n512_causal", "n1024_noncausal", "n1024_causal",
         "n2048_noncausal", "n2048_causal"]
for name in sorted(os.listdir(f"{run}/logs")):
    txt = open(f"{run}/logs/{name}", errors="replace").read()
    m = re.search(r"measured by this evaluation: (\d+) GFLOP/s", txt)
    if not m:
        continue
    rows = {k: re.search(k + r" +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +\d+ +[\d.]+% +(\d+)%", txt.replace("\\n", "\n")) for k in order}
    if not all(rows.values()):
        continue
    roof = [int(rows[k].group(5)) for k in order]; gf = [float(rows[k].group(4)) for k in order]
    sp = [float(rows[k].group(1)) for k in order]
    thr = 2 if "candidate 2 (" in txt else 1
    d = traj.get(name, {})
    gm = math.exp(sum(math.log(r) for r in roof) / 8)
    print(f"{name[:-4]:34s} {d.get('id', ''):8s} t={thr} scalar {math.exp(sum(map(math.log, sp))/8):.3f} probe {m.group(1)} "
          f"roof {' '.join(map(str, roof))} gm {gm:.0f}% min {min(roof)}%  GF/s {' '.join(f'{g:.0f}' for g in gf)}")
