"""Grow a real run to thousands of versions quickly, writing exactly what the engine writes.

A run is started for real (``start_run``: v0, the start record, the baselines, the backup).
Then each further version is what an accepted submit of an unchanged candidate (a tie: the
toy scores the same) leaves behind: a commit of the evaluated tree plus ``.avo/scores.jsonl``
(every version's line so far) with avo's message and trailers, on ``main`` in work/.git and in
the private backup, a ``vN`` tag, its ``Version`` in run.json and its ``submit`` record in
the hash-chained, signed trajectory, with ``eval`` records (as ``avo eval`` writes them) between
submits until the trajectory holds ``records`` lines. The commits go through one
``git fast-import`` (each score file stored as a delta of the one before it: written one by
one, 10,000 versions would be about 8 GB of loose objects). The full record check then runs,
under the lock, and must accept the result; it also writes the first checkpoint.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

from avo.chain import line_hash
from avo.engine import Run, _commit_message, open_run
from avo.host_cpu import cpu_class
from avo.lineage import BRANCH, META_DIR
from avo.record_check import check_record
from avo.record_format import scores_line
from avo.run_key import run_key, sign_line
from avo.state import ChainHead, RunPaths, Version, _set_head, load_state, run_lock, save_state


def _marks(marks: Path) -> dict[int, str]:
    out = {}
    for line in marks.read_text().splitlines():
        mark, sha = line.split()
        out[int(mark[1:])] = sha
    return out


def grow(run_dir: Path, versions: int, records: int) -> float:
    """Extend the run at ``run_dir`` (just started: v0 only) to ``versions`` versions and
    ``records`` trajectory lines; the seconds the full record check took on the result."""
    paths = RunPaths(run_dir)
    state = load_state(paths)
    assert len(state.versions) == 1, "grow() extends a run that has only v0"
    v0 = state.versions[0]
    spec = state.target
    lines = paths.trajectory.read_bytes().splitlines()
    seq, prev = json.loads(lines[-1])["seq"], line_hash(lines[-1])
    evaluated = subprocess.run(["git", f"--git-dir={paths.work / '.git'}", "rev-parse", f"{v0.sha}^{{tree}}"],
                               capture_output=True, text=True, check=True).stdout.strip()
    # v0's tree holds its scores file; an unchanged candidate is the same tree without it.
    t0 = time.time()
    marks_file = paths.private / "bench-marks"
    # unpackLimit 0: always a pack, which the backup gets a copy of (small imports go loose otherwise).
    importer = subprocess.Popen(["git", f"--git-dir={paths.work / '.git'}", "-c", "fastimport.unpackLimit=0",
                                 "fast-import", "--quiet", "--depth=50", f"--export-marks={marks_file}"],
                                stdin=subprocess.PIPE)
    assert importer.stdin is not None
    stream = importer.stdin
    scores = bytearray(scores_line(v0).encode())
    new: list[Version] = []
    pads = max(0, records - len(lines) - (versions - 1))
    per = pads // max(1, versions - 1)
    extra = pads - per * max(0, versions - 1)
    for k in range(1, versions):
        message = f"step {k}: an unchanged candidate"
        v = Version(n=k, sha="", tree="", scalar=v0.scalar, metrics=dict(v0.metrics), message=message, step=k,
                    time=round(t0 + k * 0.001, 3), new_best=False)
        scores += scores_line(v).encode()
        msg = _commit_message(k, message, v.scalar, v.metrics, spec.name, state.sandbox).encode()
        when = int(t0)
        stream.write(b"blob\nmark :%d\ndata %d\n" % (2 * k, len(scores)))
        stream.write(scores)
        stream.write(b"\n")
        stream.write(b"commit refs/heads/%s\nmark :%d\nauthor avo <avo@localhost> %d +0000\n"
                   b"committer avo <avo@localhost> %d +0000\ndata %d\n" % (BRANCH.encode(), 2 * k + 1, when, when,
                                                                            len(msg)))
        stream.write(msg + b"\n" + (b"from %s\n" % v0.sha.encode() if k == 1 else b""))
        stream.write(b"M 100644 :%d %s/scores.jsonl\n\n" % (2 * k, META_DIR.encode()))
        new.append(v)
    stream.close()
    if importer.wait() != 0:
        raise SystemExit("git fast-import failed")
    marks = _marks(marks_file)
    marks_file.unlink()
    for v in new:
        v.sha = marks[2 * v.n + 1]
    trees = subprocess.run(["git", f"--git-dir={paths.work / '.git'}", "log", "--format=%H %T", BRANCH],
                           capture_output=True, text=True, check=True).stdout.split("\n")
    tree_of = dict(line.split() for line in trees if line)
    for v in new:
        v.tree = tree_of[v.sha]
    # The backup gets the same objects (the pack fast-import wrote) and the same branch.
    for pack in (paths.work / ".git" / "objects" / "pack").glob("pack-*"):
        shutil.copy(pack, paths.backup / "objects" / "pack" / pack.name)
    tip = new[-1].sha if new else v0.sha
    (paths.backup / "refs" / "heads" / BRANCH).write_text(f"{tip}\n")
    with open(paths.work / ".git" / "packed-refs", "a") as fh:
        fh.write("".join(f"{v.sha} refs/tags/v{v.n}\n" for v in new))
    for v in new:
        (paths.work / ".git" / "refs" / "tags" / f"v{v.n}").unlink(missing_ok=True)
    # The trajectory: eval records between the submits, each submit as the engine writes it.
    out: list[bytes] = []

    key = run_key(paths, create=False)
    assert key is not None, "the started run has no key"
    cpu = cpu_class()

    def append(rec: dict) -> None:  # type: ignore[type-arg]
        nonlocal seq, prev
        seq += 1
        line = sign_line(key, json.dumps({**rec, "seq": seq, "prev": prev}).encode())  # as append_trajectory
        prev = line_hash(line)
        out.append(line)

    evaluations = state.evaluations
    for v in new:
        for _ in range(per + (extra if v.n == 1 else 0)):
            evaluations += 1
            append({"time": v.time, "kind": "eval", "id": f"eval{evaluations}", "step": v.step, "tree": evaluated,
                    "correct": True, "scalar": v.scalar, "metrics": v.metrics, "error": None, "notes": None,
                    "gain_vs_best": 0.0,
                    "wall_s": 0.1, "log": "x.log", "warning": None, "screening": False, "sandbox": state.sandbox,
                    "where": "local", "cpu": cpu, "secret": None, "best_before": v.n - 1, "diff": None})
        evaluations += 1
        append({"time": v.time, "kind": "submit", "id": f"step{v.step}", "step": v.step, "outcome": "accepted",
                "message": v.message, "tree": evaluated, "scalar": v.scalar, "metrics": v.metrics, "error": None,
                "notes": None, "best_before": v.n - 1, "reason": "matches the best", "wall_s": 0.1,
                "log": "x.log", "fingerprint": f"{v.n:016x}", "sandbox": state.sandbox, "new_best": False,
                "where": "local", "cpu": cpu, "secret": None, "version": v.n})
    with open(paths.trajectory, "ab") as traj:
        traj.write(b"".join(line + b"\n" for line in out))
    state.versions += new
    state.best = len(state.versions) - 1
    state.steps = state.versions[-1].step
    state.steps_since_best = len(new)
    state.evaluations = evaluations
    save_state(paths, state)
    _set_head(paths, ChainHead(count=len(lines) + len(out), sha=prev))
    run = open_run(run_dir, run_dir.parent, check=False)
    run.lineage.move_branch(tip)
    (paths.work / META_DIR / "scores.jsonl").write_bytes(bytes(scores))
    return _check(run)


def _check(run: Run) -> float:
    t = time.perf_counter()
    with run_lock(run.paths):
        check_record(run.paths, load_state(run.paths), locked=True)
    return time.perf_counter() - t
