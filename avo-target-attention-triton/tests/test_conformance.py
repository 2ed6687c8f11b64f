"""avo's conformance suite (avo.testing) against attention_triton, through real evaluator children.

Without a GPU (CI) this is the quick mode: the gate under Triton's interpreter on tiny
shapes, then interpreter-vs-CPU-SDPA timings that show the pipeline works, not how fast
anything is. The GQA target shares every line of the evaluator; test_gate.py covers it.
"""

from __future__ import annotations

from avo.testing import TargetConformance


class TestAttentionTritonConformance(TargetConformance):
    target = "attention_triton"
    garbage = "this is not Python ((( @triton.jit\n"
    hostile = "import os\nos.system({shell_py})\n{original}"
    # On the GPU the declared 5 % band applies. Under the interpreter the quick scalar is a
    # ratio of a Python-interpreted kernel to a compiled CPU SDPA call of ~0.1-0.2 ms, whose
    # CPU time swings with the shared machine's caches. Measured here (load average 7-9 on 2
    # cores): three quick evaluations of the seed gave 0.00509, 0.00636, 0.00536 (max/min
    # 1.25; one config moved 1.85x). In CI at load 4-6 with other agents' jobs (2026-12-01
    # 20:03 UTC) two gave 0.0141 and 0.00642 (2.19x). The check is that the seed scores in the
    # same range, within 3x: a unit or scale error in the pipeline is orders of magnitude.
    reproducibility_tolerance = 2.0
