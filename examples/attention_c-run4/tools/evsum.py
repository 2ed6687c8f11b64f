"""Per evaluation log of a run (runs/<id>/logs/): threads, scalar, roof per config (n256n..n2048c), roof gm/min,
kernel GFLOP/s per config, and the load and steal ticks before/after that the operator's ev.sh logged (ev.log).
    python evsum.py RUN_DIR EV_LOG [md]      md: markdown table rows"""
import json, math, os, re, sys
run, evlog = sys.argv[1], open(sys.argv[2]).read()
md = len(sys.argv) > 3
order = ["n256_noncausal", "n256_causal", "n512_noncausal", "n512_causal", "n1024_noncausal", "n1024_causal",
         "n2048_noncausal", "n2048_causal"]
traj = [json.loads(l) for l in open(f"{run}/trajectory.jsonl")]
by_log = {}
for d in traj:
    if d.get("log"):
        by_log[d["log"]] = d
    for i, c in enumerate((d.get("confirm") or {}).get("logs", []) if isinstance(d.get("confirm"), dict) else []):
        by_log.setdefault(c, {"id": d["id"] + "-confirm"})
row = re.compile(r"\[attention_c\] (n\d+_\w+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +(\d+) +([\d.]+)% +(\d+) +(\d+)%")
def gm(xs): return math.exp(sum(map(math.log, xs)) / len(xs))
def load_of(name):
    for blk in re.split(r"\n(?=start|submit)", evlog):
        if f"log: logs/{name}" in blk:
            st = re.search(r"(\d\d:\d\d:\d\d)[^\n]*? load (\S+) \S+ \S+ steal (\d+)", blk)
            en = re.search(r"\nend (\S+) load (\S+) \S+ \S+ steal (\d+)", blk)
            if st and en:
                return f"{st.group(2)} → {en.group(2)}", f"{(int(en.group(3)) - int(st.group(3))) * 10} ms"
    return "", ""
for name in sorted(os.listdir(f"{run}/logs")):
    txt = open(f"{run}/logs/{name}", errors="replace").read()
    rows = {m.group(1): m for m in row.finditer(txt)}
    if not all(k in rows for k in order):
        continue
    thr = 2 if "candidate 2 (" in txt else 1
    roof = [int(rows[k].group(9)) for k in order]; gf = [float(rows[k].group(5)) for k in order]
    sp = [float(rows[k].group(2)) for k in order]; pr = [int(rows[k].group(8)) for k in order]
    d = by_log.get(name, {})
    ld, stl = load_of(name)
    ts = re.match(r"\d{8}-(\d\d)(\d\d)(\d\d)", name)
    if md:
        print(f"| {name[:-4]} | {d.get('id', '')} | {thr} | {ts.group(1)}:{ts.group(2)}:{ts.group(3)} | {ld} | {stl} | "
              f"{gm(sp):.3f} | {min(pr)}-{max(pr)} | {' '.join(map(str, roof))} | {gm(roof):.0f} % / {min(roof)} % | "
              f"{' '.join(f'{g:.0f}' for g in gf)} |")
    else:
        print(f"{name[:-4]:34s} {d.get('id', ''):10s} t={thr} scalar {gm(sp):.3f} probe {min(pr)}-{max(pr)} roof "
              f"{' '.join(map(str, roof))} gm {gm(roof):.0f}% min {min(roof)}%  GF/s {' '.join(f'{g:.0f}' for g in gf)}  load {ld} steal {stl}")
