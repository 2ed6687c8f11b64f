"""Which distribution avo is installed as, and whether an unrelated ``avo`` is installed too.

The import package and the command are ``avo``; the distribution on the package index is
``avo-core``, because the name ``avo`` there belongs to an unrelated project (with its own
``avo`` import package). Installing both puts two packages in one ``avo/`` folder.
Kept free of heavy imports: the CLI runs :func:`foreign_avo` at every start.
"""

from __future__ import annotations

import re

CORE_DISTRIBUTION = "avo-core"
FOREIGN_NAME = "avo"
_FOREIGN = re.compile(r"^avo-[^-]+\.(dist-info|egg-info)$|^avo\.egg-info$", re.IGNORECASE)


def _names_on_path() -> list[str]:
    import os
    import sys

    names: list[str] = []
    for entry in sys.path:
        try:
            names.extend(os.listdir(entry or "."))
        except OSError:  # a zip file, a missing folder
            continue
    return names


def canonical(name: str) -> str:
    """A distribution name as the package index compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def is_core(distribution: str) -> bool:
    """Whether ``distribution`` is this project's core."""
    return canonical(distribution) == CORE_DISTRIBUTION


def foreign_avo() -> str | None:
    """A warning when a distribution named ``avo`` (not this project's core) is installed.

    That is the unrelated project on the package index (or an old install of this one made
    before the core was renamed); either way it provides an ``avo`` package of its own.
    """
    # Listing the folders on sys.path is cheap; importlib.metadata (email, zipfile, ...) is
    # imported only when an `avo-*.dist-info` is actually there.
    if not any(_FOREIGN.match(name) for name in _names_on_path()):
        return None
    from importlib import metadata

    try:
        dist = metadata.distribution(FOREIGN_NAME)
    except Exception:  # gone meanwhile, or unreadable metadata: never stop the CLI for it
        return None
    summary = (dist.metadata["Summary"] or "").strip()
    if summary.startswith("AVO: Agentic Variation Operators"):
        return (f"an old install of this tool under its former distribution name 'avo' ({dist.version}) is still "
                f"registered; the core is now '{CORE_DISTRIBUTION}'. Fix: pip uninstall -y avo && "
                f"pip install -e . (from the checkout; or pip install --force-reinstall {CORE_DISTRIBUTION})")
    what = f"avo {dist.version}" + (f" ({summary[:80]})" if summary else "")
    return (f"an unrelated distribution named 'avo' is installed ({what}); this tool is '{CORE_DISTRIBUTION}' "
            "and both provide the `avo` package, so either may be broken. Fix: pip uninstall -y avo && "
            f"pip install --force-reinstall --no-deps {CORE_DISTRIBUTION} (from a checkout: pip install -e .)")
