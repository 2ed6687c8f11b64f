"""Write evaluations.md: the evaluator's notes of every evaluation of a run, from its logs/ (which avo export
does not ship), with the trajectory id, kind and scalar, and the load the operator logged (ev.log) if any.
    python mkevals.py RUN_DIR OUT.md [ev.log]"""
import json, os, re, sys
run, out = sys.argv[1], sys.argv[2]
evlog = open(sys.argv[3]).read() if len(sys.argv) > 3 else ""
traj = [json.loads(l) for l in open(f"{run}/trajectory.jsonl")]
by_log = {d["log"]: d for d in traj if d.get("log")}
def notes_of(path):
    for line in open(path, errors="replace"):
        if line.startswith("[avo] result channel: "):
            s = line[len("[avo] result channel: "):].rstrip("\n")
            try:
                return json.loads(s).get("notes", ""), False
            except json.JSONDecodeError:
                i = s.find('"notes":"')
                return (s[i + 9:].encode().decode("unicode_escape") if i >= 0 else ""), True
    return "", False
parts = ["# Evaluation tables, verbatim", "",
         "The evaluator's own notes (threads, gate, FMA roofline, per-config table) of every evaluation of this run, "
         "copied from the run's `logs/`, which `avo export` does not ship. avo cuts a log's `result channel` line at "
         "about 2,000 characters, so the last lines of some notes (the quads left out) end in `[cut]`. Columns: config, "
         "speedup (median over quads of t_numpy / t_kernel), kernel ms and numpy ms (medians), kernel GFLOP/s, pairs, "
         "IQR of the quad ratios, roof (kernel GFLOP/s / the FMA roofline this evaluation measured; with 2 threads the "
         "roofline of 2 cores). `confirm*` logs are the interleaved re-measurements of a submit inside the noise band "
         "(`best` = the best version re-measured, `cand` = the candidate). Load: the 1-minute load average before and "
         "after, logged by the operator's `ev.sh` for `avo-eval` runs (submits: in the README).", ""]
for name in sorted(os.listdir(f"{run}/logs")):
    if not name.endswith(".log"):
        continue
    notes, cut = notes_of(f"{run}/logs/{name}")
    d = by_log.get(name)
    head = f"## {name}"
    if d:
        head += f" — trajectory id `{d['id']}`, kind {d['kind']}, scalar {d.get('scalar')}"
    parts.append(head)
    for blk in re.split(r"\n(?=start )", evlog):
        if f"log: logs/{name}" in blk:
            st = re.match(r"start (\S+) load (\S+) \S+ \S+ threads=(\d)", blk)
            en = re.search(r"\nend (\S+) load (\S+)", blk)
            if st:
                parts.append(f"\nOperator's log: start {st.group(1)} UTC, load {st.group(2)}"
                             + (f" -> {en.group(2)} at {en.group(1)}" if en else "")
                             + f", AVO_ATTENTION_C_THREADS={st.group(3)}")
    body = "\n".join(l for l in notes.splitlines() if not l.startswith("cflags")) or "(no notes in this log)"
    parts += ["", "```", body + (" [cut]" if cut else ""), "```", ""]
open(out, "w").write("\n".join(parts))
print(f"wrote {out}: {sum(1 for p in parts if p.startswith('## '))} evaluations")
