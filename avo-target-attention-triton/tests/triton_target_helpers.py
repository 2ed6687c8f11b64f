"""Test helpers: candidates made from the shipped seed with one deliberate change each.

Every test here runs without a GPU: the kernels run under Triton's interpreter.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "avo_target_attention_triton"
SEED = (PACKAGE / "seed" / "attention.py").read_text()


def mutate(old: str, new: str, text: str = SEED) -> str:
    """The seed with ``old`` replaced by ``new`` (which must occur exactly once)."""
    assert text.count(old) == 1, f"the seed no longer contains {old!r} exactly once"
    return text.replace(old, new)


# The three broken kernels the gate must tell apart from the seed.
WRONG = mutate("    acc = acc / l_i[:, None]\n", "")  # forgets to normalise: right only where one key is visible
# Counts the zero-padded keys past the end of the last block:
TAIL_BUG = mutate("        valid = cols[None, :] < N\n", "        valid = cols[None, :] < N + BLOCK_N\n")
NAN = mutate(  # walks the key blocks backwards: a causal row meets an all-masked block first
    "    for start_n in range(0, N, BLOCK_N):\n",
    "    nblocks = tl.cdiv(N, BLOCK_N)\n"
    "    for i in range(0, nblocks):\n"
    "        start_n = (nblocks - 1 - i) * BLOCK_N\n",
)
