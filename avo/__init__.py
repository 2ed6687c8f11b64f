"""avo: Agentic Variation Operators — a harness where a coding agent is the variation operator.

Plugins write ``@avo.hookimpl``; everything else is imported from its own module.
"""

from avo.hookspecs import hookimpl

__version__ = "0.1.0"
__all__ = ["__version__", "hookimpl"]
