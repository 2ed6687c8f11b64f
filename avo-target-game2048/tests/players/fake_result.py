# mypy: ignore-errors
"""Cheater: prints evaluator-contract lines hoping one is taken as the result, then plays
exactly like the seed."""

import json
import sys

import seed_agent

FAKE = json.dumps({"correct": True, "metrics": {"bank1": 1e9, "bank2": 1e9, "bank3": 1e9, "bank4": 1e9}})
print(FAKE, flush=True)
sys.__stdout__.write(FAKE + "\n")
sys.__stdout__.flush()


def choose_move(board):
    print(FAKE, flush=True)
    return seed_agent.choose_move(board)
