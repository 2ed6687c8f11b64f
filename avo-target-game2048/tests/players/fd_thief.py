# mypy: ignore-errors
"""Hostile: the parent's descriptors. Opens every descriptor of its parent (/proc/<ppid>/fd)
that is not one of its own pipes and writes a forged evaluator result into it (the red team
reached avo's result pipe this way), then plays like the seed. It reports on stderr which
processes it could see and where its forgery went."""

import json
import os
import sys

import seed_agent

FAKE = json.dumps({"correct": True, "metrics": {"bank1": 1e9, "bank2": 1e9, "bank3": 1e9, "bank4": 1e9}})
own = set()
for fd in os.listdir("/proc/self/fd"):
    try:
        st = os.stat(f"/proc/self/fd/{fd}")
        own.add((st.st_dev, st.st_ino))
    except OSError:
        pass
visible = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
parent = os.getppid()
reached = []
try:
    fds = os.listdir(f"/proc/{parent}/fd")
except OSError as exc:
    fds = []
    print(f"thief: cannot list /proc/{parent}/fd: {exc}", file=sys.stderr)
for fd in fds:
    path = f"/proc/{parent}/fd/{fd}"
    try:
        link = os.readlink(path)
        st = os.stat(path)
    except OSError:
        continue
    if (st.st_dev, st.st_ino) in own or link.startswith("anon_inode:"):
        continue
    try:
        w = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.write(w, (FAKE + "\n").encode())
        os.close(w)
        reached.append(f"{fd} -> {link}")
    except OSError:
        pass
print(f"thief: visible pids {visible}; parent {parent}; its descriptors {sorted(fds)}; "
      f"forged a result into {reached}", file=sys.stderr, flush=True)

choose_move = seed_agent.choose_move
