"""Helpers: candidates made from the shipped seed with one deliberate change each."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from avo.models import EvalOptions, EvalResult

PACKAGE = Path(__file__).resolve().parents[1] / "avo_target_attention_c"
KERNELS = Path(__file__).resolve().parent / "kernels"
SEED = (PACKAGE / "seed" / "kernel.c").read_text()
LAST_LINE = "int last = causal ? i + 1 : n;  /* keys 0..last-1 are visible */"
BODY_START = "    const float scale = 1.0f / sqrtf((float)d);\n"


def mutate(old: str, new: str, text: str = SEED) -> str:
    """The seed with ``old`` replaced by ``new`` (which must occur exactly once)."""
    assert text.count(old) == 1, f"the seed no longer contains {old!r} exactly once"
    return text.replace(old, new)


def at_entry(code: str) -> str:
    """The seed with ``code`` run first thing in attention()."""
    return mutate(BODY_START, f"    {code}\n{BODY_START}")


@pytest.fixture
def candidate(tmp_path: Path) -> Callable[..., Path]:
    """Write a candidate folder: ``candidate(kernel_text, cflags=None) -> workdir``."""
    counter = iter(range(1000))

    def make(kernel: str, cflags: str | None = None) -> Path:
        work = tmp_path / f"cand{next(counter)}"
        work.mkdir()
        (work / "kernel.c").write_text(kernel)
        if cflags is not None:
            (work / "cflags.txt").write_text(cflags + "\n")
        return work

    return make


@pytest.fixture
def evaluate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[Path], EvalResult]:
    """Run the target's evaluation in this process (the kernel still runs in the sandbox)."""
    from avo_target_attention_c.evaluate import evaluate as run

    monkeypatch.setenv("AVO_ATTENTION_C_CALL_TIMEOUT", "3")

    def go(work: Path) -> EvalResult:
        return run(work, EvalOptions(quick=True, log_dir=tmp_path / "logs"))

    return go


SIGNATURE = ("void attention(const float *q, const float *k, const float *v, float *out,\n"
             "               int heads, int n, int d, int causal)")


def hostile(prelude: str, body: str) -> str:
    """A hostile kernel: the seed's honest code as ``honest(...)``, then ``prelude`` and an
    ``attention`` whose body is ``body`` (which may call ``HONEST`` for the real work)."""
    honest = mutate(SIGNATURE, SIGNATURE.replace("void attention(", "static void honest("))
    body = body.replace("HONEST", "honest(q, k, v, out, heads, n, d, causal)")
    return f"#define _GNU_SOURCE\n{honest}\n{prelude}\n{SIGNATURE}\n{{\n{body}\n}}\n"
