"""Inputs a candidate cannot know in advance, reproducible for the same candidate.

A target derives its game seeds or tensor inputs from the run's secret (which only the
trusted evaluator sees) combined with a digest of the candidate's own files. The same
candidate always replays the same inputs, so ``avo verify`` stays exact; a candidate edited
to carry answers for its inputs changes its digest, and with it the inputs, and no process
inside the sandbox can read the secret to predict them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from avo.models import EvalOptions

META_DIR = ".avo"  # avo's own score file is not part of the candidate


def candidate_digest(workdir: Path) -> str:
    """sha256 over the candidate's files (paths, contents, executable bits), ``.avo/`` left out."""
    h = hashlib.sha256()
    root = Path(workdir)
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        # A link to a folder is listed among the folders and not descended into: hash it as
        # the link it is, or `tables -> a` and `tables -> b` would replay the same inputs.
        links = [d for d in dirs if (here / d).is_symlink()]
        dirs[:] = sorted(d for d in dirs if d not in links and not (here == root and d == META_DIR))
        for name in sorted([*files, *links]):
            path = here / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                data, mode = os.readlink(path).encode(), "l"
            else:
                data, mode = path.read_bytes(), "x" if os.access(path, os.X_OK) else "f"
            h.update(f"{rel}\0{mode}\0{len(data)}\0".encode())
            h.update(data)
    return h.hexdigest()


def strip_meta(snapshot: Path) -> None:
    """Remove avo's ``.avo`` from an exported snapshot before it is evaluated.

    The digest leaves it out, so nothing in it may reach the candidate: the agent could put
    answers there and keep its inputs.
    """
    meta = Path(snapshot) / META_DIR
    if meta.is_symlink() or meta.is_file():
        meta.unlink()
    elif meta.is_dir():
        shutil.rmtree(meta)


def derived_seed(options: EvalOptions, workdir: Path | None, label: str, default: int = 0) -> int:
    """A 63-bit seed for ``label`` (a bank, a config) of this candidate in this run.

    Outside a run (no secret) it is ``options.seed`` or ``default`` mixed with ``label``, so
    the conformance suites stay deterministic.
    """
    base = options.secret if options.secret else f"public:{options.seed if options.seed is not None else default}"
    digest = candidate_digest(workdir) if workdir is not None else "baselines"
    raw = hashlib.sha256(f"{base}\0{digest}\0{label}".encode()).digest()
    return int.from_bytes(raw[:8], "big") >> 1
