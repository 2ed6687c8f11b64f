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
    from importlib import metadata

    try:
        dist = metadata.distribution(FOREIGN_NAME)
    except metadata.PackageNotFoundError:
        return None
    except Exception:  # unreadable metadata: nothing to say, and never stop the CLI for it
        return None
    summary = (dist.metadata["Summary"] or "").strip()
    what = f"avo {dist.version}" + (f" ({summary[:80]})" if summary else "")
    return (f"an unrelated distribution named 'avo' is installed ({what}); this tool is '{CORE_DISTRIBUTION}' "
            "and both provide the `avo` package, so either may be broken. Fix: pip uninstall -y avo && "
            f"pip install --force-reinstall --no-deps {CORE_DISTRIBUTION} (from a checkout: pip install -e .)")
