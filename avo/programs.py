"""The programs avo starts (git, bubblewrap) and the search path its evaluators get.

The shell that runs `avo submit` is the agent's, and so is its ``PATH``. A ``bwrap`` or ``git``
of the agent's, put ahead of the system's, would run as avo, outside any sandbox: round seven
of the red team put a fake ``bwrap`` first, and a directory evaluator (``isolation: candidate``)
started the candidate through it, unsandboxed, which wrote a forged result into the evaluator's
stdout (1e9 accepted). So the system's folders come first, for avo and for every evaluator it
starts: a program found there cannot be shadowed, and one found only further along the
caller's ``PATH`` (a toolchain under /opt) is still found.
"""

from __future__ import annotations

import os
import shutil

SYSTEM_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def search_path(path: str | None = None) -> str:
    """The system's folders, then the absolute entries of ``path`` (default: ``$PATH``) not among them."""
    caller = os.environ.get("PATH", "") if path is None else path
    rest = [p for p in caller.split(os.pathsep) if os.path.isabs(p) and p.rstrip("/") not in SYSTEM_DIRS]
    return os.pathsep.join([*SYSTEM_DIRS, *dict.fromkeys(rest)])


def find(name: str) -> str | None:
    """The absolute path of the program ``name`` along :func:`search_path`, or ``None``."""
    return shutil.which(name, path=search_path())


def program(name: str) -> str:
    """:func:`find`'s path for ``name``, or ``name`` itself when it is nowhere (starting it then
    fails with the usual error, naming it)."""
    return find(name) or name
