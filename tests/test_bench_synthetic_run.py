"""The bench's synthetic runs are laid out as the engine lays out a real one.

`bench/synthetic_run.py` grows a run to 10,000 versions in seconds by writing what accepted
submits write. Its figures mean something only while that stays true: once the engine wrote
one loose file per `vN` tag while the synthetic run packed them, and every growth table
missed ~0.7 s of a real run's submit at 10,000 versions. So a few versions are grown both
ways here and every place a command reads is compared: the record's fields, the trajectory's
fields per kind of record, where the tags live, and the files of work/.git, the backup and
the private folder.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from avo.engine import evaluate_work, open_run, start_run, submit
from avo.state import RunPaths, read_trajectory

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _grow() -> Any:
    sys.path.insert(0, str(BENCH))
    try:
        from synthetic_run import grow
    finally:
        sys.path.remove(str(BENCH))
    return grow


def real_run(toy: Path, runs_root: Path, versions: int) -> Path:
    """Accepted submits of a candidate that scores the same (a comment added), an `avo eval` before each."""
    run = start_run(str(toy), runs_root, stall_limit=10**6)
    for k in range(1, versions):
        with open(run.paths.work / "solution.py", "a") as fh:
            fh.write(f"# step {k}\n")
        evaluate_work(run)
        run = open_run(str(run.paths.root), runs_root)
        out = submit(run, f"step {k}: a comment")
        assert out.outcome == "accepted", out.reason
        run = open_run(str(run.paths.root), runs_root)
    return run.paths.root


def layout(root: Path) -> dict[str, Any]:
    """What a command reads, with names that differ between two runs (ids, hashes, numbers) folded."""
    paths = RunPaths(root)
    state = json.loads(paths.run_json.read_text())
    records = read_trajectory(paths)
    fields: dict[str, set[frozenset[str]]] = {}  # each kind's records, by the fields each one has
    for r in records:
        fields.setdefault("seed" if r.get("id") == "seed" else str(r.get("kind")), set()).add(frozenset(r))
    git = paths.work / ".git"

    def files(folder: Path) -> set[str]:
        return {re.sub(r"[0-9a-f]{6,}|\d+", "#", str(p.relative_to(folder))) for p in folder.rglob("*")
                if p.is_file() and "objects" not in p.parts and "logs" not in p.parts}

    packed = (git / "packed-refs").read_text() if (git / "packed-refs").exists() else ""
    return {
        "run.json": set(state),
        "version": set().union(*(set(v) for v in state["versions"])),
        "trajectory": fields,
        "tags packed": sorted(re.findall(r"refs/tags/(v\d+)\n", packed)) == sorted(f"v{v['n']}" for v in
                                                                                  state["versions"]),
        "loose tags": sorted(p.name for p in (git / "refs" / "tags").iterdir()),
        "work/.git": files(git) - {"index", "COMMIT_EDITMSG", "ORIG_HEAD"},
        "backup": files(paths.backup),
        "private": files(paths.private) - files(paths.private / "eval") if (paths.private / "eval").is_dir()
        else files(paths.private),
    }


def test_a_synthetic_run_is_laid_out_as_real_submits_lay_one_out(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    real = layout(real_run(toy, runs_root, 4))
    grown = start_run(str(toy), runs_root, stall_limit=10**6)
    _grow()(grown.paths.root, 4, 10)
    synthetic = layout(grown.paths.root)

    assert synthetic["run.json"] == real["run.json"]
    assert synthetic["version"] == real["version"]
    for kind in ("submit", "eval", "seed", "start", "baseline"):
        want, got = real["trajectory"].get(kind, set()), synthetic["trajectory"].get(kind, set())
        assert got == want, (f"{kind} records: fields only the engine writes "
                             f"{sorted(set().union(*want) - set().union(*got))}, only the synthetic run "
                             f"{sorted(set().union(*got) - set().union(*want))}; "
                             f"{len(want)} and {len(got)} different field sets")
    assert real["tags packed"] and synthetic["tags packed"]
    assert synthetic["loose tags"] == real["loose tags"] == []
    assert synthetic["work/.git"] == real["work/.git"]
    assert synthetic["backup"] == real["backup"]
    assert synthetic["private"] >= real["private"] - {"eval"}
