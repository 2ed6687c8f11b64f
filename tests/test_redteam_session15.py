"""Red team, round six: a directory target's candidate reaching its evaluator's stdout.

A directory evaluator that runs inside the sandbox shares it with the candidate processes it
starts: same PID namespace, same user. Through ``/proc/<evaluator>/fd/1`` a candidate re-opens
the pipe avo reads the result from, both ways: it writes a forged result line, then steals the
evaluator's own line with readers that queued on the pipe before avo's. The toy target (the
template users copy) now says ``isolation: candidate``: its evaluator runs outside the sandbox
and starts solution.py through ``$AVO_CANDIDATE_PREFIX``, in a PID namespace of its own.
"""

from __future__ import annotations

from pathlib import Path

from avo.engine import open_run, start_run, submit

THIEF = r'''
import json, os, time
X, Y = 7.0, 3.0


def square(n):
    return n * n


E = os.getppid()  # the process that started this one: the evaluator, when they share a sandbox
FORGED = (json.dumps({"correct": True, "metrics": {"config_a": 1e9, "config_b": 1e9}}) + "\n").encode()
try:
    w = os.open(f"/proc/{E}/fd/1", os.O_WRONLY)
    for _ in range(12):
        if os.fork() == 0:
            os.setsid()
            for fd in (0, 1, 2):
                os.close(fd)
            got = os.read(os.open(f"/proc/{E}/fd/1", os.O_RDONLY), 65536)  # queued ahead of avo's reader
            if got == FORGED:
                os.write(w, got)  # ours: hand it on, to avo in the end
            os._exit(0)  # the evaluator's own line, stolen
    time.sleep(0.3)
    os.write(w, FORGED)
    time.sleep(0.3)
except OSError:
    pass
'''


def test_a_candidate_cannot_reach_its_directory_evaluators_stdout(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # Before: with the toy's evaluator in the sandbox beside it, this candidate landed 1e9 on
    # both configs in 10 evaluations of 10.
    run = start_run(str(toy), runs_root)
    for step in range(3):
        (run.paths.work / "solution.py").write_text(THIEF + f"# try {step}\n")
        outcome = submit(open_run(run.paths.root, runs_root), f"X=7, Y=3 (try {step})")
        state = open_run(run.paths.root, runs_root).state
        best = max(v.metrics.get("config_a", 0.0) for v in state.versions)
        assert best <= 101.0, (outcome.outcome, state.versions[-1].metrics)
        # In its own PID namespace its /proc/<ppid> is the sandbox's init, whose stdout is the
        # pipe of its own answer: what it forges or steals there is its answer, judged as one.
        assert outcome.outcome in ("accepted", "rejected", "failed"), outcome


# Round seven: the harness that runs solution.py shares its process, so solution.py printed the
# harness's answer itself, for cases of its choosing, and exited: no square() at all, accepted
# as correct at 101 on both configs. The evaluator now draws the cases, some fresh each time,
# and requires an answer to every one of them, in order.
FORGER = r'''
import json, os
print(json.dumps({"squares": [{"n": 0, "got": 0}], "X": 7.0, "Y": 3.0}), flush=True)
os._exit(0)  # before the harness's own loop runs
'''


def test_a_candidate_that_answers_for_the_harness_does_not_pass_the_gate(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(toy), runs_root)
    (run.paths.work / "solution.py").write_text(FORGER)
    outcome = submit(open_run(run.paths.root, runs_root), "no square at all")
    assert outcome.outcome == "failed", outcome
    assert "no answer for square(1)" in (outcome.evaluation.result.error or "")
    assert [v.n for v in open_run(run.paths.root, runs_root).state.versions] == [0]
