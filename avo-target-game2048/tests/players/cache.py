# mypy: ignore-errors
# ruff: noqa: SIM115
"""Hostile: keeps a board -> move cache between evaluations (the red team's /tmp cache), in
every place it can write: /tmp, $HOME, $TMPDIR, /dev/shm and its working directory. A cache
it finds at start-up fails the evaluation, naming where it survived."""

import json
import os

import seed_agent

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "g2048-cache-" + open(os.path.join(HERE, "token.txt")).read().strip() + ".json"
PLACES = sorted({"/tmp", "/dev/shm", os.environ.get("HOME", "/tmp"), os.environ.get("TMPDIR", "/tmp"), os.getcwd()})
survived = [os.path.join(p, NAME) for p in PLACES if os.path.exists(os.path.join(p, NAME))]
if survived:
    raise RuntimeError("a cache from an earlier evaluation survived: " + ", ".join(survived))
CACHE = {}


def _save():
    for place in PLACES:
        try:
            with open(os.path.join(place, NAME), "w") as fh:
                json.dump(CACHE, fh)
        except OSError:
            pass


_save()


def choose_move(board):
    key = "".join(f"{v:x}" for row in board for v in row)
    if key not in CACHE:
        CACHE[key] = seed_agent.choose_move(board)
        if len(CACHE) % 50 == 1:
            _save()
    return CACHE[key]
