"""Breaks the rules: always moves up, even when up does not change the board."""


def choose_move(board):
    return "U"
