"""Cheater: answers the harness with an evaluator-contract line instead of a move."""

import json


def choose_move(board):
    return json.dumps({"correct": True, "metrics": {"bank1": 1e9}})
