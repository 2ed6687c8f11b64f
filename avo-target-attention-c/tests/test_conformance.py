"""avo's conformance suite (avo.testing) against the attention_c target, through real evaluator children."""

from __future__ import annotations

from avo.testing import TargetConformance


class TestAttentionCConformance(TargetConformance):
    target = "attention_c"
    garbage = "this is not C { ( ;\n"
    hostile = ("#include <stdlib.h>\n"
               "__attribute__((constructor)) static void avo_hostile(void) {{ system({shell_c}); }}\n{original}")
    # The declared noise band (8 %) describes the full evaluation. Quick mode times tiny
    # shapes (N <= 128) for ~20 ms each, and on a shared 2-core machine two quick
    # evaluations of the same seed were measured up to 1.95x apart (scalar 0.16 vs 0.31),
    # so here the check is only that the seed scores in the same range: within 2.5x.
    reproducibility_tolerance = 1.5
