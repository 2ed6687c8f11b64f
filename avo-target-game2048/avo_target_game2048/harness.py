"""Play a candidate's games through the pipe and turn them into the evaluator contract.

The engine runs here; the player runs in its own sandboxed process (:mod:`.player`) on a
fresh scratch copy of the candidate. Every rule is checked on this side: the reply must be
one of U/D/L/R and must change the board, the CPU time of everything in the sandbox must
stay inside the budget, the player must stay one thread in one process, each reply must
come within the per-move wall limit and the whole evaluation within the total wall limit.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from avo.eval_inputs import derived_seed
from avo.models import EvalOptions, EvalResult
from avo_target_game2048.engine import MASK64, MOVES, Game, max_tile, spawn, successors
from avo_target_game2048.player import RUNNER, PlayerFailure, PlayerProcess

GAMES_PER_BANK = 12
BANK_NAMES = ("bank1", "bank2", "bank3", "bank4")
QUICK_GAMES = 2
_CHECK_EVERY_S = 0.5  # how often the budget is read from /proc while the player runs
_TASKS_EVERY_S = 2.0  # how often the harness looks for extra threads or processes
_NOT_COPIED = (".git", ".avo")  # version control and avo's own score file are not the player


def game_seed(bank: int, index: int) -> int:
    """The public seed of game ``index`` (0-based) of bank ``bank`` (1-based).

    Used only where there is no run secret: conformance suites, tests, and runs recorded
    before runs had one (their lineage was scored on these games and stays comparable).
    """
    return 0x20480000 + 1000 * bank + index


def secret_seeds(bank_seed: int, games: int) -> list[int]:
    """The ``games`` game seeds of one bank, spread from the bank's derived seed."""
    return [int.from_bytes(hashlib.sha256(f"{bank_seed}:{i}".encode()).digest()[:8], "big") & MASK64
            for i in range(games)]


def bank_seeds(options: EvalOptions, workdir: Path | None, bank: int, name: str, games: int) -> list[int]:
    """The seeds bank ``name`` plays for this candidate (``workdir``; ``None``: the baselines).

    With the run's secret, each bank's seed comes from the secret and the candidate's
    digest (:func:`avo.eval_inputs.derived_seed`): the same tree replays the same games in
    the same run (``avo verify`` is exact), an edited tree gets new ones, and nothing inside
    the sandbox can compute them. Without a secret: the public seeds of :func:`game_seed`.
    """
    if not options.secret:
        return [game_seed(bank, i) for i in range(games)]
    return secret_seeds(derived_seed(options, workdir, f"game2048:{name}"), games)


class Settings(BaseModel):
    """What one evaluation plays and the limits it enforces."""

    model_config = ConfigDict(extra="forbid")

    budget_s: float = Field(120.0, gt=0, description="player CPU seconds for the whole evaluation")
    move_timeout_s: float = Field(20.0, gt=0, description="wall seconds for one reply (and for start-up)")
    wall_limit_s: float | None = Field(None, gt=0, description="wall seconds for the whole evaluation")
    max_moves: int = Field(100_000, gt=0, description="moves after which a game is stopped and scored")
    banks: dict[str, list[int]] = Field(default_factory=dict)

    def total_wall_s(self) -> float:
        """The total wall limit: by default five times the budget plus two minutes (2 shared cores)."""
        return self.wall_limit_s if self.wall_limit_s is not None else 5 * self.budget_s + 120

    @classmethod
    def from_options(cls, options: EvalOptions, workdir: Path | None = None) -> Settings:
        """Full or quick bank set for ``workdir``, plus test-only overrides passed as extra
        EvalOptions fields (``workdir`` ``None``: the baselines' shared games of the run).

        Extra fields understood: ``budget_s``, ``move_timeout_s``, ``wall_limit_s``,
        ``max_moves``, ``games_per_bank``.
        """
        extra: dict[str, Any] = dict(options.model_extra or {})
        unknown = set(extra) - {"budget_s", "move_timeout_s", "wall_limit_s", "max_moves", "games_per_bank"}
        if unknown:
            raise ValueError(f"unknown game2048 evaluation options: {', '.join(sorted(unknown))}")
        per_bank = int(extra.pop("games_per_bank", QUICK_GAMES if options.quick else GAMES_PER_BANK))
        names = BANK_NAMES[:1] if options.quick else BANK_NAMES
        banks = {name: bank_seeds(options, workdir, b, name, per_bank) for b, name in enumerate(names, start=1)}
        return cls(banks=banks, **extra)


@dataclass
class GameRecord:
    """How one game ended."""

    bank: str
    index: int
    seed: int
    score: int
    moves: int
    best_tile: int
    capped: bool = False


@dataclass
class PlayReport:
    """Everything one evaluation measured; ``error`` set means the gate is closed."""

    games: list[GameRecord] = field(default_factory=list)
    cpu_s: float = 0.0
    wall_s: float = 0.0
    error: str | None = None


def _where(bank: str, index: int, number: int, total: int, move_no: int) -> str:
    return f"game {number} of {total} ({bank}, seed #{index}), move {move_no}"


def _check_tasks(player: PlayerProcess) -> None:
    why = player.extra_tasks()
    if why:
        raise PlayerFailure(why)


def play_all(cwd: Path, settings: Settings, stderr_path: Path, log: Any = None, *, runner: Path) -> PlayReport:
    """Start the player in ``cwd`` (its scratch copy, with ``runner`` from :func:`stage_scratch`)
    and play every game of every bank, in order."""
    report = PlayReport()
    schedule = [(bank, i, seed) for bank, seeds in settings.banks.items() for i, seed in enumerate(seeds)]
    started = time.monotonic()
    deadline = started + settings.total_wall_s()
    player = PlayerProcess(cwd, stderr_path, cpu_budget_s=settings.budget_s, runner=runner)
    where = "start-up (before the first move)"
    try:
        hello = player.read_line(min(settings.move_timeout_s, settings.total_wall_s()))
        if hello.startswith("!"):
            raise PlayerFailure(hello[1:].strip() + player.stderr_tail())
        if hello != "ready":
            raise PlayerFailure(f"the runner's first line was {hello[:80]!r}, expected 'ready'")
        _check_tasks(player)  # what importing agent.py started
        next_check = time.monotonic() + _CHECK_EVERY_S
        next_tasks = time.monotonic()
        for number, (bank, index, seed) in enumerate(schedule, start=1):
            game = Game(seed)
            rng = game.rng
            board, score, moves = game.board, 0, 0
            capped = False
            while True:
                options = successors(board)
                if not options:
                    break
                if moves >= settings.max_moves:
                    capped = True
                    break
                where = _where(bank, index, number, len(schedule), moves + 1)
                player.send(f"{board:016x} {score}")
                now = time.monotonic()
                if now >= deadline:
                    raise PlayerFailure(f"the evaluation passed its total wall-clock limit of "
                                        f"{settings.total_wall_s():g} s")
                wait = min(settings.move_timeout_s, deadline - now)
                try:
                    reply = player.read_line(wait)
                except PlayerFailure as exc:
                    if "per-move wall limit" in str(exc) and wait < settings.move_timeout_s:
                        raise PlayerFailure(f"the evaluation passed its total wall-clock limit of "
                                            f"{settings.total_wall_s():g} s") from None
                    raise
                if reply.startswith("!"):
                    raise PlayerFailure(reply[1:].strip() + player.stderr_tail())
                if reply not in MOVES:
                    raise PlayerFailure(f"the player replied {reply[:60]!r}; expected one of U, D, L, R")
                chosen = options.get(reply)
                if chosen is None:
                    raise PlayerFailure(
                        f"the player chose {reply}, which does not change the board "
                        f"(legal: {', '.join(options)}; board {board:016x})")
                board = spawn(chosen[0], rng)
                score += chosen[1]
                moves += 1
                now = time.monotonic()
                if now >= next_check:
                    next_check = now + _CHECK_EVERY_S
                    used = player.cpu_seconds()
                    if used > settings.budget_s:
                        raise PlayerFailure(f"over the thinking-time budget: {used:.1f} s of {settings.budget_s:g} s")
                    if now >= next_tasks:
                        next_tasks = now + _TASKS_EVERY_S
                        _check_tasks(player)
            record = GameRecord(bank, index, seed, score, moves, max_tile(board), capped)
            report.games.append(record)
            if log is not None:
                print(f"{bank} #{index}: score {score}, {moves} moves, best tile {record.best_tile}"
                      f"{' (stopped at the move cap)' if capped else ''}", file=log, flush=True)
        where = "the end of the evaluation"
        _check_tasks(player)
    except PlayerFailure as exc:
        report.error = f"{where}: {exc}"
    finally:
        report.cpu_s = player.close()
        report.wall_s = time.monotonic() - started
    if report.cpu_s > settings.budget_s:
        # Past the budget is zero, whatever else happened: the budget is the rule that matters.
        report.error = (f"over the thinking-time budget: {report.cpu_s:.1f} s of {settings.budget_s:g} s "
                        f"of player CPU time (stopped at {where})")
    return report


def _notes(report: PlayReport, settings: Settings) -> str:
    games = report.games
    reached = sum(1 for g in games if g.best_tile >= 2048)
    moves = sum(g.moves for g in games)
    best = max((g.best_tile for g in games), default=0)
    rate = moves / report.cpu_s if report.cpu_s > 0 else float("inf")
    per_bank = "; ".join(
        f"{bank} mean {sum(g.score for g in games if g.bank == bank) / max(1, len(settings.banks[bank])):.0f}"
        for bank in settings.banks)
    capped = sum(1 for g in games if g.capped)
    parts = [
        f"{len(games)} games; reached 2048 in {reached}; best tile {best}",
        f"player CPU {report.cpu_s:.1f} s of the {settings.budget_s:g} s budget "
        f"({100 * report.cpu_s / settings.budget_s:.0f} %); {moves} moves, {rate:.0f} moves per CPU second",
        f"wall {report.wall_s:.1f} s; {per_bank}",
    ]
    if capped:
        parts.append(f"{capped} games stopped at the {settings.max_moves}-move cap")
    return ". ".join(parts)


def result_of(report: PlayReport, settings: Settings) -> EvalResult:
    """The evaluator contract: the gate, one mean score per bank, and notes for the agent."""
    if report.error is not None:
        return EvalResult(correct=False, metrics={}, error=report.error,
                          notes=_notes(report, settings) if report.games else None)
    metrics: dict[str, float] = {}
    for bank in settings.banks:
        scores = [g.score for g in report.games if g.bank == bank]
        mean = sum(scores) / len(scores)
        # A geometric mean needs positive values; a bank with no merge at all counts as 1 point.
        metrics[bank] = mean if mean > 0 else 1.0
    assert all(math.isfinite(v) for v in metrics.values())
    return EvalResult(correct=True, metrics=metrics, notes=_notes(report, settings))


def stage_scratch(workdir: Path, scratch: Path) -> tuple[Path, Path]:
    """Copy the candidate's files and the player-side runner into a fresh ``scratch``.

    Returns ``(player_dir, runner)``: the player's working directory (its only writable
    folder in the sandbox, gone after the evaluation) and the runner, in a folder of its
    own so that it shadows no candidate file. Symbolic links are copied as links.
    """
    player_dir = scratch / "player"
    shutil.copytree(workdir, player_dir, symlinks=True, ignore=shutil.ignore_patterns(*_NOT_COPIED))
    shim = scratch / "shim"
    shim.mkdir()
    runner = shim / RUNNER.name
    shutil.copy2(RUNNER, runner)
    return player_dir, runner


def evaluate_dir(workdir: Path, settings: Settings, log_dir: Path | None = None,
                 label: str = "candidate") -> EvalResult:
    """Check that ``workdir`` holds an ``agent.py`` and evaluate a fresh copy of it."""
    if not (workdir / "agent.py").is_file():
        return EvalResult(correct=False, error=f"no agent.py in {workdir}: the player must be agent.py "
                          "defining choose_move(board)")
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{label}"
    with tempfile.TemporaryDirectory(prefix="game2048-") as tmp:
        base = log_dir if log_dir is not None and log_dir.is_dir() else Path(tmp)
        stderr_path = base / f"player-stderr-{stamp}.log"
        games_log = base / f"games-{stamp}.log"
        scratch = Path(tmp) / "scratch"
        scratch.mkdir()
        player_dir, runner = stage_scratch(workdir, scratch)
        with open(games_log, "w") as log:
            report = play_all(player_dir, settings, stderr_path, log, runner=runner)
        return result_of(report, settings)
