"""Live progress from inside an evaluation reaches the user while it runs (issue 15)."""

from __future__ import annotations

from pathlib import Path

from avo.engine import start_run
from avo.progress import says_baseline


def test_progress_lines_of_the_baselines_child_are_shown_as_they_arrive(toy: Path, runs_root: Path,
                                                                       core_plugins: None) -> None:
    ev = toy / "eval.py"
    ev.write_text(ev.read_text().replace(
        "    if args.baselines:\n",
        "    if args.baselines:\n"
        "        import time\n"
        "        for name in ('zeros', 'midpoint'):\n"
        "            print(f'avo-progress: baseline {name}: measured', file=sys.stderr, flush=True)\n"
        "            print('avo-progress-ish: not a progress line', file=sys.stderr, flush=True)\n"
        "            time.sleep(0.2)\n"))
    said: list[str] = []
    start_run(str(toy), runs_root, progress=said.append)
    live = [s for s in said if s.startswith("  baseline") and s.endswith("measured")]
    assert live == ["  baseline zeros: measured", "  baseline midpoint: measured"], said
    # ...before the summary lines start prints once the child has answered.
    first_summary = next(i for i, s in enumerate(said) if s.startswith("  baseline zeros: ") and s != live[0])
    assert said.index(live[-1]) < first_summary
    assert not any("progress-ish" in s for s in said)


def test_a_baseline_the_target_already_announced_is_printed_once(toy: Path, runs_root: Path,
                                                                 core_plugins: None) -> None:
    # game2048 announces each baseline's scalar as it finishes; avo's summary said it again
    # ("baseline greedy: 2,735.0" twice). A line that says another number is not avo's: avo's follows.
    ev = toy / "eval.py"
    ev.write_text(ev.read_text().replace(
        "    if args.baselines:\n",
        "    if args.baselines:\n"
        "        print('avo-progress: baseline zeros: 5.74456', file=sys.stderr, flush=True)\n"
        "        print('avo-progress: baseline midpoint: 16.0', file=sys.stderr, flush=True)\n"))
    said: list[str] = []
    start_run(str(toy), runs_root, progress=said.append)
    assert [s for s in said if s.startswith("  baseline zeros")] == ["  baseline zeros: 5.74456"], said
    assert [s for s in said if s.startswith("  baseline midpoint")] == ["  baseline midpoint: 16.0",
                                                                        "  baseline midpoint: 15.2"], said


def test_says_baseline_compares_at_avos_precision() -> None:
    assert says_baseline("baseline greedy: 2,735.0", "greedy", "2,735.0")
    assert says_baseline("baseline greedy: 2,734.97", "greedy", "2,735.0")
    assert not says_baseline("baseline greedy: 3,197", "greedy", "3,192.0")  # another mean
    assert not says_baseline("baseline greedy: 3", "greedy", "3.4")  # coarser than avo's
    assert not says_baseline("baseline greedy: measured", "greedy", "3.4")
    assert not says_baseline("baseline greedy2: 3.4", "greedy", "3.4")
    assert says_baseline("baseline greedy: failed: timeout", "greedy", "failed: timeout")
    assert not says_baseline("baseline greedy: nan", "greedy", "3.4")
