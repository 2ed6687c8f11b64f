"""avo target ``game2048``: evolve a 2048 player under a hard thinking-time budget.

The plugin module registered under the ``avo`` entry-point group. Imports stay light (no
engine tables are built) until a hook actually evaluates something.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from avo import hookimpl
from avo.models import EvalOptions, EvalResult, NoiseSpec, TargetSpec

NAME = "game2048"
PACKAGE_DIR = Path(__file__).resolve().parent
SEED_DIR = PACKAGE_DIR / "seed"
KB_DIR = PACKAGE_DIR / "kb"
BASELINES_DIR = PACKAGE_DIR / "baselines"
# Weak to strong; each is an agent.py played through the same pipe as a candidate.
BASELINES = ("random_legal", "fixed_order", "greedy", "corner", "expectimax")

GOAL = """\
Evolve agent.py into the strongest 2048 player you can, under a hard thinking-time budget.

Interface: agent.py defines choose_move(board) -> "U" | "D" | "L" | "R"; board is 4 rows of
4 tile values (0 = empty), row 0 at the top. "U" slides tiles towards row 0, "L" towards
column 0. The move must change the board. agent.py runs in its own sandboxed process
(standard library only, one thread, no child processes), started once per evaluation in a
fresh copy of your files; module-level state persists across moves and games, nothing
persists across evaluations. The harness owns the engine and the random spawns (2 with
p 0.9, else 4) and talks to your process over a pipe, one line per move; what you print
goes to a log.

Score: the game score is the sum of the values of all merged tiles (two 256s merging add
512), so the benchmark pays for merge points, not for how healthy a board looks. Each
metric (bank1..bank4) is the mean game score over 12 games; the scalar is the geometric
mean of the four banks. Quick runs use bank1 with 2 games. The games are drawn from a
secret that is fresh for every evaluation (re-measurements of the same files included) and
the content of your files, so scores carry a sampling spread (the declared noise band) and
no player can know its games in advance; `avo verify` replays a version's recorded games.

Budget: 120 s of CPU time for the whole evaluation (48 games, start-up and imports
included), summed over every process and thread in the sandbox and measured by the
harness from the kernel. Past the budget the score is zero, not "a bit less". A reply
must also come within 20 s of wall time, and the whole evaluation within 720 s. Search
depth, evaluation cost and pruning compete for the same seconds; that trade-off is the
problem. An illegal or malformed reply, an exception, an exit, extra threads or processes
fail the evaluation with a message naming the game and the move.

Rules: play from the board you are shown. The harness's files and the run's secret are not
visible to the player; do not try to predict its random number generator.
The knowledge base (kb/) covers expectimax, evaluation terms, bitboards and time management.
"""


def spec() -> TargetSpec:
    """The TargetSpec of game2048."""
    return TargetSpec(
        name=NAME,
        description="2048 player evolution under a 120 s CPU budget (stdlib Python, pipe-isolated)",
        entrypoint="agent.py",
        direction="maximize",
        goal=GOAL,
        eval_timeout=900.0,
        baseline_timeout=3600.0,
        has_baselines=True,
        has_quick=True,  # options.quick runs a smaller benchmark set
        # Each evaluation plays its own games (drawn from a fresh secret and the tree), so two
        # evaluations differ by sampling noise (~8 %, measured: README); verify replays them.
        noise=NoiseSpec(band=0.16, confirm_runs=3),
        requirements=[],
    )


@hookimpl
def avo_targets() -> list[TargetSpec]:
    """Announce game2048."""
    return [spec()]


@hookimpl
def avo_seed(target: TargetSpec, dest: Path) -> None:
    """Write the weak seed player agent.py."""
    shutil.copy2(SEED_DIR / "agent.py", dest / "agent.py")


@hookimpl
def avo_knowledge(target: TargetSpec, dest: Path) -> None:
    """Copy the knowledge base documents."""
    for doc in sorted(KB_DIR.glob("*.md")):
        shutil.copy2(doc, dest / doc.name)


@hookimpl
def avo_evaluate(target: TargetSpec, workdir: Path, options: EvalOptions) -> EvalResult:
    """Play the candidate's games through the pipe and score them."""
    from avo_target_game2048.harness import Settings, evaluate_dir

    return evaluate_dir(workdir, Settings.from_options(options, workdir), options.log_dir)


@hookimpl
def avo_baselines(target: TargetSpec, options: EvalOptions) -> dict[str, EvalResult]:
    """Measure the reference players, each through the same pipe and budget as a candidate."""
    from avo_target_game2048.baselines_run import measure_all

    return measure_all(options)
