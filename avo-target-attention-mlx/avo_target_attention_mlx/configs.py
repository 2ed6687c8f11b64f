"""The benchmark configurations, the error budget and the input distribution.

Pure data, no heavy imports: the plugin announces the target from here cheaply.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: Gate: max |out - ref| / max |V| per config must stay at or below this. Dropping softmax
#: mass delta (and renormalising) moves the output by at most 2 * delta * max|V|, so the
#: budget admits approximations that provably drop under 0.5 % of the mass.
ERROR_BUDGET = 1e-2

#: Logits (scale * q.k) have roughly this standard deviation (times a per-call factor in
#: [0.8, 1.25]): peaked like real decode attention, so most softmax mass sits in few keys.
LOGIT_STD = 3.0


class DecodeConfig(BaseModel):
    """One decode shape: q [B, Hq, 1, D] against k/v [B, Hkv, L, D]."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    batch: int = Field(ge=1)
    q_heads: int = Field(ge=1)
    kv_heads: int = Field(ge=1)
    length: int = Field(ge=1)
    head_dim: int = Field(ge=1)

    @model_validator(mode="after")
    def _grouped(self) -> DecodeConfig:
        if self.q_heads % self.kv_heads:
            raise ValueError(f"{self.name}: q_heads {self.q_heads} is not a multiple of kv_heads {self.kv_heads}")
        return self

    @property
    def group(self) -> int:
        """Query heads per KV head (1 = MHA, q_heads = MQA)."""
        return self.q_heads // self.kv_heads

    def kv_elements(self) -> int:
        """Elements of K plus V: what a decode step must read at least once."""
        return 2 * self.batch * self.kv_heads * self.length * self.head_dim

    def describe(self) -> str:
        layout = "MHA" if self.group == 1 else ("MQA" if self.kv_heads == 1 else f"GQA x{self.group}")
        return (f"B={self.batch} Hq={self.q_heads} Hkv={self.kv_heads} ({layout}) "
                f"L={self.length} D={self.head_dim}")


FULL_CONFIGS: tuple[DecodeConfig, ...] = (
    DecodeConfig(name="L1k_gqa4_d128", batch=1, q_heads=32, kv_heads=8, length=1024, head_dim=128),
    DecodeConfig(name="L2k_b2_mha16_d64", batch=2, q_heads=16, kv_heads=16, length=2048, head_dim=64),
    DecodeConfig(name="L4k_gqa4_d64", batch=1, q_heads=32, kv_heads=8, length=4096, head_dim=64),
    DecodeConfig(name="L16k_mha4_d64", batch=1, q_heads=4, kv_heads=4, length=16384, head_dim=64),
    DecodeConfig(name="L32k_mqa8_d128", batch=1, q_heads=8, kv_heads=1, length=32768, head_dim=128),
)

QUICK_CONFIGS: tuple[DecodeConfig, ...] = (
    # Large enough (milliseconds per call) that scheduler stalls on a shared machine do not
    # dominate, small enough that a quick evaluation takes a few seconds.
    DecodeConfig(name="L1k_gqa4_d64", batch=1, q_heads=8, kv_heads=2, length=1024, head_dim=64),
    DecodeConfig(name="L2k_b2_mha4_d64", batch=2, q_heads=4, kv_heads=4, length=2048, head_dim=64),
    DecodeConfig(name="L4k_mqa4_d64", batch=1, q_heads=4, kv_heads=1, length=4096, head_dim=64),
)

#: Timed (reference, candidate) pairs per config.
FULL_REPS = 15
QUICK_REPS = 15


def configs_for(quick: bool) -> tuple[DecodeConfig, ...]:
    """The config set of a full or a quick evaluation."""
    return QUICK_CONFIGS if quick else FULL_CONFIGS
