"""What is measured: the two problems, gate shapes, benchmark configs, tolerances, repetitions.

Kept free of heavy imports: the target spec, the README and the tests quote these numbers.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

D = 128  # head dimension: fixed by the launcher's contract
BLOCK = 64  # the seed's tile; odd gate lengths sit around multiples of it (and of 128)

# Gate tolerance, elementwise against a float32 reference computed from the same bf16
# inputs: |out - ref| <= ATOL + RTOL * |ref|. Why: out is a convex combination of rows of v
# (entries ~N(0,1)), so |out| is ~1 or below. Storing the result in bf16 alone costs up to
# 2^-9 = 0.2 % relative; an honest kernel also rounds P to bf16 before the P@V product
# (each weight off by <= 0.4 %, errors averaging out over keys), which measured on the seed
# and torch SDPA stays below ~1e-2 absolute. 2e-2 + 2e-2*|ref| leaves room for any sane
# accumulation order (exp2 with folded scale, split-K merges) while every bug the gate
# exists for is far above: a dropped or doubled tail key, a wrong mask or scale, a wrong
# KV head (errors 5e-2 to 1e0), and NaN/Inf fail outright.
ATOL = 2e-2
RTOL = 2e-2

TOTAL_TOKENS = 32768  # batch x length is held fixed, so every config does comparable work per token


class Problem(BaseModel):
    """One target's head layout."""

    model_config = ConfigDict(frozen=True)

    name: str
    heads_q: int = Field(gt=0)
    heads_kv: int = Field(gt=0)
    quick_heads_q: int = Field(gt=0)
    quick_heads_kv: int = Field(gt=0)
    cpu_odd: tuple[int, ...] = Field(description="gate lengths under the interpreter (both masks each)")


# Under the interpreter one call costs ~1 s per (64-row block x heads) at n=130 on a loaded
# 2-core machine, so the CPU gate stays small: 1, a tail, just above a block, two blocks and
# a tail (GQA, with 4x the query heads, stops just above a block).
MHA = Problem(name="attention_triton", heads_q=16, heads_kv=16, quick_heads_q=2, quick_heads_kv=2,
              cpu_odd=(1, 17, 65, 130))
# Quick GQA keeps two KV heads (group 4), so a wrong query-to-KV head mapping shows.
GQA = Problem(name="attention_triton_gqa", heads_q=32, heads_kv=4, quick_heads_q=8, quick_heads_kv=2,
              cpu_odd=(1, 17, 65))
PROBLEMS = {p.name: p for p in (MHA, GQA)}


class Shape(BaseModel):
    """One gate shape: (batch, heads_q, heads_kv, length), mask, softmax scale."""

    model_config = ConfigDict(frozen=True)

    batch: int = Field(gt=0)
    heads_q: int = Field(gt=0)
    heads_kv: int = Field(gt=0)
    n: int = Field(gt=0)
    causal: bool
    scale: float | None = None  # None: 1/sqrt(D)

    def softmax_scale(self) -> float:
        return self.scale if self.scale is not None else D ** -0.5

    def label(self) -> str:
        sc = f" scale={self.scale:g}" if self.scale is not None else ""
        return (f"batch={self.batch} heads_q={self.heads_q} heads_kv={self.heads_kv} n={self.n} "
                f"{'causal' if self.causal else 'non-causal'}{sc}")


class Config(BaseModel):
    """One score axis: a length and a mask, batch = TOTAL_TOKENS / length."""

    model_config = ConfigDict(frozen=True)

    batch: int
    heads_q: int
    heads_kv: int
    n: int
    causal: bool

    @property
    def key(self) -> str:
        return f"n{self.n}_{'causal' if self.causal else 'noncausal'}"

    def shape(self) -> Shape:
        return Shape(batch=self.batch, heads_q=self.heads_q, heads_kv=self.heads_kv, n=self.n, causal=self.causal)

    def flops(self) -> float:
        """Matmul FLOPs of the forward pass (QK^T and PV), halved for causal, as FlashAttention counts."""
        f = 4.0 * self.batch * self.heads_q * self.n * self.n * D
        return f / 2 if self.causal else f


class Plan(BaseModel):
    """Everything one evaluation does."""

    gate: list[Shape]
    configs: list[Config]
    warmup: int
    pairs: int
    spot_rows: int = Field(description="random rows checked per timed call, plus the first and last")
    full_checks: int = Field(description="timed calls per config whose whole output is compared")
    call_timeout: float


def _odd(heads_q: int, heads_kv: int, lengths: tuple[int, ...], batch2_below: int) -> list[Shape]:
    """Both masks at each length; batch 2 (a batch-stride bug shows) below ``batch2_below``."""
    return [Shape(batch=2 if n < batch2_below else 1, heads_q=heads_q, heads_kv=heads_kv, n=n, causal=causal)
            for n in lengths for causal in (False, True)]


# Lengths around the tile sizes kernels use (64, 128): 1, just above, just below, primes.
GPU_ODD = (1, 2, 17, 63, 64, 65, 127, 129, 255, 1000, 1023, 1025, 2049, 4093)
QUICK_LENGTHS_CPU = (32, 64)  # a partial block and a full one (the gate covers longer tails)
QUICK_LENGTHS_GPU = (1024, 2048)
FULL_LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768)


def plan(problem: Problem, quick: bool, cuda: bool) -> Plan:
    """The evaluation for a device: on a CUDA GPU the full grid (or a short quick one); on
    the CPU only the quick mode exists (Triton's interpreter, tiny shapes)."""
    if not cuda:
        hq, hk = problem.quick_heads_q, problem.quick_heads_kv
        gate = _odd(hq, hk, problem.cpu_odd, batch2_below=64)
        gate.append(Shape(batch=1, heads_q=hq, heads_kv=hk, n=40, causal=True, scale=0.5))  # peaky softmax
        configs = [Config(batch=1, heads_q=hq, heads_kv=hk, n=n, causal=c) for n in QUICK_LENGTHS_CPU
                   for c in (False, True)]
        return Plan(gate=gate, configs=configs, warmup=0, pairs=2, spot_rows=4, full_checks=1, call_timeout=120.0)
    hq, hk = problem.heads_q, problem.heads_kv
    lengths = QUICK_LENGTHS_GPU if quick else FULL_LENGTHS
    configs = [Config(batch=TOTAL_TOKENS // n, heads_q=hq, heads_kv=hk, n=n, causal=c) for n in lengths
               for c in (False, True)]
    gate = _odd(hq, hk, GPU_ODD, batch2_below=2048)
    gate += [Shape(batch=1, heads_q=hq, heads_kv=hk, n=3000, causal=c, scale=0.5) for c in (False, True)]
    # Every config's own family: its length and heads, batch cut to 2 to keep the reference cheap.
    gate += [c.shape().model_copy(update={"batch": min(c.batch, 2)}) for c in configs]
    return Plan(gate=gate, configs=configs, warmup=3, pairs=8 if quick else 25, spot_rows=8,
                full_checks=1 if quick else 2, call_timeout=60.0)
