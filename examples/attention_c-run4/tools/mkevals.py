"""Write evaluations.md: the evaluator's notes of every evaluation of this round's two runs, from their logs/ (which
avo export does not ship), with the trajectory id, kind and scalar, and the load and steal the operator's ev.sh
logged (ev.log), if any.     python mkevals.py OUT.md EV_LOG RUN_DIR[=TITLE] ..."""
import json, os, re, sys
out, evlog = sys.argv[1], open(sys.argv[2]).read()
parts = ["# Evaluation tables, verbatim", "",
         "The evaluator's own notes (threads, gate, FMA roofline, per-config table) of every evaluation of this "
         "round's two runs, copied from the runs' `logs/`, which `avo export` does not ship. avo cuts a log's `result "
         "channel` line at about 2,000 characters, so the tables here come from the log's `[attention_c]` lines, which "
         "are complete. Columns: config, speedup (median over quads of t_numpy / t_kernel), kernel ms and numpy ms "
         "(medians), kernel GFLOP/s, pairs, IQR of the quad ratios, probe (the FMA probe's median beside the config's "
         "pairs, GFLOP/s; with 2 threads times 2), roof (kernel GFLOP/s / probe). `confirm*` logs: the interleaved "
         "re-measurements of a submit inside the noise band. Load (1-minute load average) and steal (the steal "
         "column of /proc/stat, in ms) before and after: logged by the operator's `ev.sh` for `avo-eval` runs, by "
         "hand for submits (tools/ev.log).", ""]
for arg in sys.argv[3:]:
    run, _, title = arg.partition("=")
    traj = [json.loads(l) for l in open(f"{run}/trajectory.jsonl")]
    by_log = {d["log"]: d for d in traj if d.get("log")}
    parts += [f"# {title or os.path.basename(run)}", ""]
    for name in sorted(os.listdir(f"{run}/logs")):
        if not name.endswith(".log"):
            continue
        lines = [l[len("[attention_c] "):].rstrip() for l in open(f"{run}/logs/{name}", errors="replace")
                 if l.startswith("[attention_c] ") and not l.startswith("[attention_c] built")]
        d = by_log.get(name)
        head = f"## {name}"
        if d:
            head += f" — trajectory id `{d['id']}`, kind {d['kind']}, scalar {d.get('scalar')}"
        parts.append(head)
        for blk in re.split(r"\n(?=start|submit)", evlog):
            if f"log: logs/{name}" in blk:
                st = re.search(r"(\d\d:\d\d:\d\d)[^\n]*? load (\S+) \S+ \S+ steal (\d+)", blk)
                en = re.search(r"\nend (\S+) load (\S+) \S+ \S+ steal (\d+)", blk)
                if st and en:
                    parts.append(f"\nOperator's log: {st.group(1)}-{en.group(1)} UTC, load {st.group(2)} -> {en.group(2)}, "
                                 f"steal {(int(en.group(3)) - int(st.group(3))) * 10} ms")
        parts += ["", "```", "\n".join(lines) or "(no evaluator lines in this log)", "```", ""]
open(out, "w").write("\n".join(parts))
print(f"wrote {out}: {sum(1 for p in parts if p.startswith('## '))} evaluations")
