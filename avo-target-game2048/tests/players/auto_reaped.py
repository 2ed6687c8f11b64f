# mypy: ignore-errors
# ruff: noqa: SIM115
"""Hostile: CPU escape through children the kernel reaps itself. With SIGCHLD ignored a
child's CPU lands in nobody's cutime. mode.txt says how: "each" (every move's thinking
in a child that sends the move back through a pipe and exits; the player waits until it
is gone) or "burst" (at the
first move a child spends 0.8 s of CPU and exits; once it is gone the player spends 0.5 s
itself: no live tree ever shows more than about 0.9 s, the two together 1.3 s)."""

import os
import signal
import time

import seed_agent

HERE = os.path.dirname(os.path.abspath(__file__))
MODE = open(os.path.join(HERE, "mode.txt")).read().strip()
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
_started = False


def _in_child(board):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, seed_agent.choose_move(board).encode())
        os._exit(0)
    os.close(w)
    move = os.read(r, 8).decode()
    os.close(r)
    _gone(pid)  # so no look of the harness ever finds it alive
    return move


def _gone(pid):
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.001)


def _spin(seconds):
    t = time.process_time()
    while time.process_time() - t < seconds:
        pass


def _burst():
    pid = os.fork()
    if pid == 0:
        _spin(0.8)
        os._exit(0)
    _gone(pid)
    _spin(0.5)  # its own, after the child is gone: 1.3 s in all, never more than 0.9 s alive


def choose_move(board):
    global _started
    if MODE == "each":
        return _in_child(board)
    if not _started:
        _started = True
        _burst()
    return seed_agent.choose_move(board)
