"""avo: Agentic Variation Operators — a harness where a coding agent is the variation operator.

Plugins write ``@avo.hookimpl``; everything else is imported from its own module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from avo.hookspecs import hookimpl

__version__ = "0.1.0"
__all__ = ["__version__", "hookimpl"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: every command starts by importing this package, and pluggy is not
    # needed to print `avo --help`.
    if name == "hookimpl":
        from avo.hookspecs import hookimpl

        return hookimpl
    raise AttributeError(f"module 'avo' has no attribute {name!r}")
