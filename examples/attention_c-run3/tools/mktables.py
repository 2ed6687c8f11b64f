"""Markdown tables for the README from the run's trajectory and logs: the step table (speedup (roof) per config) and
every 1-/2-thread evaluation's roof gm/min. Loads come from ev.log (avo-eval) or the SUBMIT_LOADS below."""
import json, math, os, re, sys
run, evlog = sys.argv[1], open(sys.argv[2]).read()
order = ["n256_noncausal", "n256_causal", "n512_noncausal", "n512_causal", "n1024_noncausal", "n1024_causal",
         "n2048_noncausal", "n2048_causal"]
traj = [json.loads(l) for l in open(f"{run}/trajectory.jsonl")]
def table(name):
    txt = open(f"{run}/logs/{name}", errors="replace").read().replace("\\n", "\n")
    m = re.search(r"measured by this evaluation: (\d+) GFLOP/s", txt)
    rows = {k: re.search(k + r" +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +\d+ +[\d.]+% +(\d+)%", txt) for k in order}
    thr = 2 if "candidate 2 (" in txt else 1
    return int(m.group(1)), {k: (float(r.group(1)), float(r.group(4)), int(r.group(5))) for k, r in rows.items()}, thr
def gm(xs): return math.exp(sum(map(math.log, xs)) / len(xs))
def load_of(name):
    for blk in re.split(r"\n(?=start )", evlog):
        if f"log: logs/{name}" in blk:
            st = re.match(r"start (\S+) load (\S+)", blk); en = re.search(r"\nend (\S+) load (\S+)", blk)
            return st.group(1), st.group(2), en.group(2) if en else "?"
    return None
print("STEP TABLE")
for d in traj:
    if d["kind"] == "eval" and d["id"] == "seed" or d["kind"] == "submit":
        probe, t, _ = table(d["log"])
        label = "x_0 (v0)" if d["id"] == "seed" else (f"**v{d['version']}** ({d['id']})" if d.get("version") else d["id"])
        roofs = [t[k][2] for k in order]
        print(f"| {label} | {d['scalar']:.3f} | " + " | ".join(f"{t[k][0]:.3f} ({t[k][2]} %)" for k in order)
              + f" | {gm(roofs):.0f} % / {min(roofs)} % | {probe} |")
print("\nEVAL TABLE")
for name in sorted(os.listdir(f"{run}/logs")):
    try:
        probe, t, thr = table(name)
    except (AttributeError, TypeError):
        continue
    d = next((x for x in traj if x.get("log") == name), {})
    roofs = [t[k][2] for k in order]; ld = load_of(name)
    ts = re.match(r"\d{8}-(\d\d)(\d\d)(\d\d)", name)
    print(f"| {name[:-4]} | {d.get('id', '')} | {thr} | {ts.group(1)}:{ts.group(2)}:{ts.group(3)} | "
          + (f"{ld[1]} → {ld[2]}" if ld else "") + f" | {gm([t[k][0] for k in order]):.3f} | {probe} | "
          + " ".join(str(r) for r in roofs) + f" | {gm(roofs):.0f} % / {min(roofs)} % | "
          + " ".join(f"{t[k][1]:.0f}" for k in order) + " |")
