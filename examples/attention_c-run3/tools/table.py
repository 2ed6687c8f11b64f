"""Print the evaluator's notes (per-config table) of an evaluation from its log in runs/<id>/logs/
(the result channel line; avo cuts that line at ~2,000 characters, so the tail may be missing).
    python table.py RUN_DIR [LOG_NAME]     (default: the newest log)"""
import json, os, sys
run = sys.argv[1]
logs = sorted(os.listdir(f"{run}/logs"), key=lambda f: os.path.getmtime(f"{run}/logs/{f}"))
name = sys.argv[2] if len(sys.argv) > 2 else logs[-1]
for line in open(f"{run}/logs/{name}", errors="replace"):
    if line.startswith("[avo] result channel: "):
        s = line[len("[avo] result channel: "):].rstrip("\n")
        try:
            notes = json.loads(s).get("notes", "")
        except json.JSONDecodeError:  # cut: decode the notes string as far as it goes
            i = s.find('"notes":"')
            notes = s[i + 9:].encode().decode("unicode_escape") + " [cut]" if i >= 0 else "(no notes)"
        print(f"--- {name}")
        print("\n".join(l for l in notes.splitlines() if not l.startswith("cflags")))
