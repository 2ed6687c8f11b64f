"""avo targets ``attention_triton`` (MHA) and ``attention_triton_gqa``: a Triton attention kernel.

The candidate is ``attention.py``: a Triton forward-attention kernel and a launcher
``attention(q, k, v, causal, scale) -> out`` (bf16, head dim 128). The evaluator runs it in
its own sandboxed worker, gates it against a float32 reference (every config's shape family
plus odd lengths and causal edge cases), and scores it per config as its speedup over torch
SDPA's FlashAttention backend, timed interleaved on the same GPU. Without a CUDA GPU only
the quick mode runs: the gate under Triton's interpreter on tiny shapes.

This module only declares hooks; torch and Triton are imported when an evaluation runs.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from avo import hookimpl
from avo.files import copy_contents
from avo.models import EvalOptions, EvalResult, NoiseSpec, ResourceLimits, TargetResources, TargetSpec

from avo_target_attention_triton.configs import ATOL, FULL_LENGTHS, GQA, MHA, PROBLEMS, RTOL, TOTAL_TOKENS, Problem

GOAL = """\
Make attention.py, a Triton forward-attention kernel with the launcher
attention(q, k, v, causal, scale) -> out, as fast as possible on this NVIDIA GPU.
q is (batch, {hq}, n, 128) bfloat16, k and v (batch, {hk}, n, 128){gqa}; out is bf16 like q.
Score per config (n = {lengths}, batch = {tokens} / n, causal and non-causal) =
t_sdpa_flash / t_yours: torch SDPA's FlashAttention backend timed interleaved with your
kernel on the same GPU (CUDA events, L2 flushed, fresh inputs every call); the scalar is the
geometric mean, 1.0 = parity. cuDNN SDPA (and FlashAttention 3/4 where installed) are the
other baselines. Correctness is a gate: every evaluation compares against float32 on odd
lengths (1, 17, 63, 65, 129, 1023, 1025, ...), both masks, scale != 1/sqrt(d), and every
config's own shape, within |err| <= {atol:g} + {rtol:g}*|ref|; NaN/Inf fail; the output of every
timed call is spot-checked. Your kernel runs in a sandbox with its own process: it cannot
see the baseline or the reference. Query the device (torch.cuda.get_device_properties,
triton.runtime.driver) instead of assuming one. Without a GPU only `--quick` runs (Triton's
interpreter on tiny shapes, whose tl.dot needs float32 operands: keep the seed's UPCAST
switch). Read kb/ first.
"""


def spec(problem: Problem) -> TargetSpec:
    """One target as avo sees it."""
    gqa = problem.heads_q != problem.heads_kv
    return TargetSpec(
        name=problem.name,
        description=("Triton attention forward kernel, bf16, head dim 128, "
                     + (f"grouped-query ({problem.heads_q} query heads, {problem.heads_kv} KV heads)" if gqa
                        else f"multi-head ({problem.heads_q} heads)")
                     + "; speedup over torch SDPA (flash) on a CUDA GPU"),
        entrypoint="attention.py",
        direction="maximize",
        goal=GOAL.format(hq=problem.heads_q, hk=problem.heads_kv,
                         gqa=f"; query head h reads KV head h // {problem.heads_q // problem.heads_kv}" if gqa else "",
                         lengths=", ".join(f"{n // 1024}k" for n in FULL_LENGTHS), tokens=TOTAL_TOKENS,
                         atol=ATOL, rtol=RTOL),
        eval_timeout=1800.0,
        baseline_timeout=3600.0,
        has_baselines=True,
        # No RLIMIT_AS: CUDA reserves virtual address space for the device memory and UVM
        # (hundreds of GiB on an H200), and cuInit fails under a 16 GiB cap. The workers
        # inherit the evaluator's limits, so this is also the candidate's.
        limits=ResourceLimits(address_space_mb=None),
        # Not measured on a GPU yet (none was reachable when this target was written): a
        # cautious 5 % band until bench.py --gpu has measured repeated evaluations.
        noise=NoiseSpec(band=0.05, confirm_runs=3),
        stall_limit=3,
        requirements=["torch", "triton"],
        resources=TargetResources(cpus=2, gpus=1, memory_mb=16384, accelerator="cuda"),
    )


def _package_dir(sub: str) -> Path:
    return Path(str(resources.files(__package__).joinpath(sub)))


def _problem(target: TargetSpec) -> Problem | None:
    return PROBLEMS.get(target.name)


@hookimpl
def avo_targets() -> list[TargetSpec]:
    return [spec(MHA), spec(GQA)]


@hookimpl
def avo_seed(target: TargetSpec, dest: Path) -> bool | None:
    if _problem(target) is None:
        return None
    copy_contents(_package_dir("seed"), dest)
    return True


@hookimpl
def avo_knowledge(target: TargetSpec, dest: Path) -> bool | None:
    if _problem(target) is None:
        return None
    copy_contents(_package_dir("kb"), dest)
    return True


@hookimpl
def avo_evaluate(target: TargetSpec, workdir: Path, options: EvalOptions) -> EvalResult | None:
    problem = _problem(target)
    if problem is None:
        return None
    from avo_target_attention_triton.evaluate import evaluate

    return evaluate(problem, workdir, options)


@hookimpl
def avo_baselines(target: TargetSpec, options: EvalOptions) -> dict[str, EvalResult] | None:
    problem = _problem(target)
    if problem is None:
        return None
    from avo_target_attention_triton.evaluate import baselines

    return baselines(problem, options)
