"""avo's conformance suite (avo.testing) against the game2048 target, through real evaluator children."""

from __future__ import annotations

from avo.testing import TargetConformance


class TestGame2048Conformance(TargetConformance):
    target = "game2048"
    garbage = "def choose_move(board):\n    return (((\n"
    hostile = "import os\nos.system({shell_py})\n{original}"
    # Outside a run there is no secret: the public seeds, the same games every time.
    reproducibility_tolerance = 0.0
