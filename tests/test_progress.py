"""Live progress from inside an evaluation reaches the user while it runs (issue 15)."""

from __future__ import annotations

from pathlib import Path

from avo.engine import start_run


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
