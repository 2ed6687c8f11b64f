"""avo's conformance suite (avo.testing) against the attention_mlx target, through real evaluator children."""

from __future__ import annotations

from avo.testing import TargetConformance


class TestAttentionMlxConformance(TargetConformance):
    target = "attention_mlx"
    garbage = "import mlx.core as mx\ndef decode_attention(:\n"
    hostile = "import os\nos.system({shell_py})\n{original}"
    # The declared noise band (10 %) describes the full evaluation. Two quick evaluations of
    # the same seed on a shared, loaded 2-core machine were measured 35 % apart, so here the
    # check is that the seed scores in the same range: within 2x.
    reproducibility_tolerance = 1.0
