# mypy: ignore-errors
# ruff: noqa: SIM115
"""Hostile: CPU escape. At its first move it double-forks a setsid daemon (the red team's
escape from the player's process group) that does the thinking on the other core, while the
player itself answers at once. token.txt holds a marker the daemon carries on its command
line (so a test can look for it afterwards) and the daemon's mode: "spin" (forever) or
"burst" (1.5 s of CPU, then exit before the harness looks: the player waits for its
"done" file, at most 15 s)."""

import os
import sys
import time

import seed_agent

HERE = os.path.dirname(os.path.abspath(__file__))
MARKER, MODE = open(os.path.join(HERE, "token.txt")).read().split()
WORK = {
    "spin": "while True: pass",
    "burst": "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.5: pass\n"
             "open('burst.done', 'w').close()",
}[MODE]
_started = False


def _daemon():
    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-S", "-c", WORK, MARKER])
        os._exit(0)
    os.waitpid(child, 0)


def choose_move(board):
    global _started
    if not _started:
        _started = True
        _daemon()
        if MODE == "burst":
            waited = time.monotonic()
            while not os.path.exists("burst.done") and time.monotonic() - waited < 15:
                time.sleep(0.05)
            time.sleep(0.1)  # and for the sandbox's init to reap it
    time.sleep(0.005)
    return seed_agent.choose_move(board)
