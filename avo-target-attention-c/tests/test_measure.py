"""Scoring machinery: thread settings, baselines, where the inputs come from."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from avo.models import EvalOptions, EvalResult
from conftest import SEED, hostile

from avo_target_attention_c.evaluate import baselines, input_seeds
from avo_target_attention_c.settings import plan

Make = Callable[..., Path]
Eval = Callable[[Path], EvalResult]


def test_two_threads_per_side_are_stated_and_timed_on_the_wall_clock(
        candidate: Make, evaluate: Eval, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AVO_ATTENTION_C_THREADS", "2")
    result = evaluate(candidate(SEED))
    assert result.correct, result.error
    assert result.notes is not None
    assert "candidate 2 (OMP_NUM_THREADS=2" in result.notes and "openblas 2 thread(s)" in result.notes
    assert "wall-clock time measured by the evaluator" in result.notes
    cpus = result.notes.split("pinned to CPU ", 1)[1].split(")", 1)[0]
    assert len(cpus.split(",")) == min(2, len(os.sched_getaffinity(0)))


def test_a_bad_thread_setting_is_a_clear_failure(candidate: Make, evaluate: Eval,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AVO_ATTENTION_C_THREADS", "zero")
    result = evaluate(candidate(SEED))
    assert not result.correct
    assert result.error == "AVO_ATTENTION_C_THREADS must be a positive number, got 'zero'"


def test_baselines_report_numpy_as_parity_and_explain_a_missing_torch() -> None:
    results = baselines(EvalOptions(quick=True))
    numpy = results["numpy"]
    assert numpy.correct and set(numpy.metrics.values()) == {1.0}
    assert set(numpy.metrics) == {c.key for c in plan(quick=True).configs}
    if importlib.util.find_spec("torch") is None:
        assert set(results) == {"numpy"}
        assert numpy.notes is not None and "torch is not installed" in numpy.notes
    else:  # the [torch] extra: SDPA measured in the sandbox worker like a candidate, same loop, same threads
        torch = results["torch_sdpa"]
        assert torch.correct, torch.error
        assert set(torch.metrics) == set(numpy.metrics) and all(v > 0 for v in torch.metrics.values())
        assert torch.notes is not None and torch.notes.splitlines()[0].split()[:2] == ["config", "speedup"]


def test_inputs_depend_on_the_run_secret_and_the_candidate_and_replay_for_the_same_pair(
        candidate: Make) -> None:
    one, two = candidate(SEED), candidate(SEED + "\n/* edited */\n")
    run_a, run_b = EvalOptions(secret="secret-a"), EvalOptions(secret="secret-b")
    assert input_seeds(run_a, one) == input_seeds(run_a, one)  # the same tree replays its inputs
    assert input_seeds(run_a, one) != input_seeds(run_b, one)  # another run: other inputs
    assert input_seeds(run_a, one) != input_seeds(run_a, two)  # an edited tree: other inputs
    gate, bench = input_seeds(run_a, one)
    assert gate != bench


def test_the_fma_roofline_is_measured_and_each_config_is_shown_as_a_fraction_of_it(
        candidate: Make, evaluate: Eval) -> None:
    from avo_target_attention_c.roofline import fma_roofline

    roof = fma_roofline()
    assert roof is not None and roof > 0
    result = evaluate(candidate(SEED))
    assert result.correct and result.notes is not None
    assert "FMA roofline of the pinned core (12 independent chains" in result.notes
    # a CPU with AMX tiles: the engine's peak is stated, and the roof column stays the FMA one
    assert ("matrix engine (AMX-BF16 tiles): peak" in result.notes) == ({"amx_tile", "amx_bf16"} <= _cpu_flags())
    lines = result.notes.splitlines()
    header = next(line for line in lines if line.startswith("config"))
    assert header.split()[-2:] == ["probe", "roof"]
    # Every config's roof is its own GFLOP/s over the probe's median beside its own calls.
    for line in lines[lines.index(header) + 1:lines.index(header) + 9]:
        cols = line.split()
        gflops, probe, frac = float(cols[4]), float(cols[7]), float(cols[8].rstrip("%")) / 100
        assert probe > 0 and frac == pytest.approx(gflops / probe, abs=0.006), line


def test_what_is_subtracted_is_an_empty_call_timed_beside_the_calls_in_a_worker_without_candidate_code(
        candidate: Make, evaluate: Eval, tmp_path: Path) -> None:
    import re

    from avo_target_attention_c.build import compile_serve
    from avo_target_attention_c.evaluate import empty_twin

    result = evaluate(candidate(SEED))
    assert result.correct and result.notes is not None
    line = next(x for x in result.notes.splitlines() if x.startswith("subtracted from each call"))
    found = re.search(r"\) (\d+)-(\d+) us; a no-op back to back [^:]*: (\d+) us", line)
    assert found is not None, line
    low, high, hot = (int(x) for x in found.groups())
    assert 0 < low <= high and hot > 0
    # The twin holds our empty kernel and nothing of the candidate's.
    with empty_twin(tmp_path / "twin", 1, compile_serve(tmp_path / "serve")) as twin:
        maps = Path(f"/proc/{twin.pid}/maps").read_text()
        assert "empty-build/libkernel.so" in maps and "cand" not in maps
        twin.request({"op": "call", "heads": 1, "n": 1, "d": 64, "causal": False}, 10.0, "an empty call")
        # Timed calls go through the request loop in C, which answers in a byte, and back.
        twin.serve()
        costs = [twin.call(1, 1, 64, False, 10.0, "an empty call in the loop") for _ in range(5)]
        assert all(c.cpu > 0 for c in costs)
        with pytest.raises(RuntimeError, match="unserve"):
            twin.request({"op": "noop"}, 10.0, "a JSON request while the loop serves")
        twin.unserve()
        twin.request({"op": "noop"}, 10.0, "a no-op after the loop")


SPIN_PROBE = """
import os, sys, threading, time
if sys.argv[1] == "numpy-first":
    import numpy  # noqa: F401  (loaded before the judge: too late to set OpenBLAS's idle timeout)
from avo_target_attention_c.evaluate import judge
main = threading.get_native_id()
def others():
    total = 0
    for tid in os.listdir("/proc/self/task"):
        if int(tid) != main:
            fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")
with judge(2) as jd:
    import numpy as np
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((4, 1024, 64), dtype=np.float32) for _ in range(3))
    out, worst = np.empty_like(q), 0.0
    for _ in range(4):
        jd.reference(q, k, v, out, False)
        before = others()
        time.sleep(0.25)
        worst = max(worst, others() - before)
print(f"{worst:.3f}")
"""


def test_with_two_threads_the_references_blas_threads_sleep_between_calls() -> None:
    # OpenBLAS's idle threads spin after each call (~0.1 s by default) on the CPUs the kernel's
    # timed call runs on next; the evaluator makes them sleep at once. Control: a process that
    # loaded NumPy before the judge keeps the spinning threads.
    import subprocess
    import sys

    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("needs two CPUs")

    def burnt(mode: str) -> float:
        proc = subprocess.run([sys.executable, "-c", SPIN_PROBE, mode], capture_output=True, text=True,
                              env={k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS")})
        assert proc.returncode == 0, proc.stderr
        return float(proc.stdout.strip())

    assert burnt("judge-first") < 0.03  # CPU seconds other threads used in 0.25 s after a call
    assert burnt("numpy-first") > 0.05


def test_with_two_threads_a_config_whose_calls_swing_is_refused_not_scored(
        candidate: Make, evaluate: Eval, monkeypatch: pytest.MonkeyPatch) -> None:
    # Wall-clock calls that swing measure the machine's contention, and a ratio of them was
    # once accepted as a 40 % gain (settings.STEADY_2T). Here the swing is the kernel's own:
    # every other call sleeps 5 ms (no CPU, so no rule about work between calls applies).
    import avo_target_attention_c.evaluate as ev
    from avo_target_attention_c.settings import STEADY_2T, BenchConfig

    monkeypatch.setenv("AVO_ATTENTION_C_THREADS", "2")
    small = plan(True).model_copy(update={"configs": [BenchConfig(heads=2, n=64, causal=False)], "steady": STEADY_2T})
    monkeypatch.setattr(ev, "plan", lambda quick: small)
    kernel = hostile("#include <unistd.h>\nstatic int calls;\n", "    HONEST;\n    if (++calls % 3) usleep(5000);")
    result = evaluate(candidate(kernel))
    assert not result.correct and result.error is not None
    assert result.error.startswith("not timed: the machine was too busy for a 2-thread measurement"), result.error
    assert "kernel's calls at n64_noncausal took a median of" in result.error, result.error
    # Quick mode (tests, demos: microsecond calls that swing with every wake-up) never refuses.
    monkeypatch.setattr(ev, "plan", lambda quick: small.model_copy(update={"steady": None}))
    quick = evaluate(candidate(kernel))
    assert quick.correct, quick.error


def test_with_two_threads_a_process_on_the_evaluations_cpus_is_refused_not_scored(
        candidate: Make, evaluate: Eval, monkeypatch: pytest.MonkeyPatch) -> None:
    # Attack (2026-12-04, examples/attention_c-run6): one busy loop pinned to the second CPU,
    # started beside a 2-thread evaluation, made NumPy's calls steadily ~27x slower and the
    # kernel's 1.5x: no swing to refuse, and a kernel recorded at 8.1 scored 40.5. An agent's
    # shell can start such a loop beside its own submit.
    import subprocess
    import sys

    import avo_target_attention_c.evaluate as ev
    from avo_target_attention_c.settings import BenchConfig

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.fail("needs two CPUs")
    monkeypatch.setenv("AVO_ATTENTION_C_THREADS", "2")
    # A round of ~1 s (not a quick round's 20 pairs) for /proc/stat's 10 ms ticks to tell a share;
    # a swing rule so lax it never refuses (microsecond calls swing with every wake-up): only the
    # check of other processes' CPU can refuse here, as it would in a full evaluation.
    small = plan(True).model_copy(update={"configs": [BenchConfig(heads=2, n=64, causal=False)],
                                          "steady": 1e9, "max_pairs": 100_000, "min_time": 1.0, "max_time": 2.0})
    monkeypatch.setattr(ev, "plan", lambda quick: small)
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(loop.pid, {cpus[-1]})
        attacked = evaluate(candidate(SEED))
    finally:
        loop.kill()
        loop.wait()
    assert not attacked.correct and attacked.error is not None
    assert attacked.error.startswith("not timed: other processes ran on the evaluation's CPUs while it timed "
                                     "2 threads per side on the wall clock"), attacked.error
    assert "n64_noncausal" in attacked.error, attacked.error
    # Nothing else running: scored, and the notes say how much ran beside it.
    quiet = evaluate(candidate(SEED))
    assert quiet.correct, quiet.error
    assert quiet.notes is not None and "other processes on the evaluation's CPUs while timing" in quiet.notes


def test_foreign_cpu_time_is_the_cpus_busy_time_less_the_evaluations_own() -> None:
    from avo_target_attention_c.contention import TICK_SLACK, Tally, Usage, busy_seconds, foreign

    tick = 1 / os.sysconf("SC_CLK_TCK")
    stat = ("cpu  9 9 9 9 9 9 9 9 0 0\n"
            "cpu0 100 5 20 900 7 1 2 50 0 0\n"  # user nice system idle iowait irq softirq steal
            "cpu1 200 0 10 800 0 0 0 0 0 0\n"
            "cpu2 999 999 999 0 0 0 0 0 0 0\n")
    assert busy_seconds([0], stat) == pytest.approx(128 * tick)  # idle, iowait and steal are not busy
    assert busy_seconds([0, 1], stat) == pytest.approx(338 * tick)  # cpu2 is not ours; "cpu " is the total
    assert foreign(Usage(10.0, 4.0), Usage(11.0, 4.7)) == pytest.approx(0.3)
    assert foreign(Usage(10.0, 4.0), Usage(10.5, 4.6)) == pytest.approx(-0.1)  # coarse ticks: either way
    slack = TICK_SLACK * 2 * tick  # per round, for 2 CPUs
    t = Tally()
    t.add(Usage(10.0, 4.0), Usage(11.0, 4.2), wall=1.0, ncpus=2)  # 0.8 s of others in 2 CPU-seconds
    t.add(Usage(20.0, 4.2), Usage(20.2, 4.4), wall=1.0, ncpus=2)  # nothing else
    assert t.share == pytest.approx((0.8 - 2 * slack) / 4.0)
    short = Tally()  # a round of 50 ms that read one tick more on each CPU than was ours
    short.add(Usage(1.0, 0.0), Usage(1.0 + 2 * tick, 0.0), wall=0.05, ncpus=2)
    assert short.share == 0.0
    assert Tally().share == 0.0


def test_a_config_faster_than_the_machine_can_compute_is_not_scored() -> None:
    from avo_target_attention_c.evaluate import MAX_ROOF, beyond_roof

    assert beyond_roof("n256_noncausal", 100.0, 100.0, quick=False) is None  # at the roof: a great kernel
    assert beyond_roof("n256_noncausal", MAX_ROOF * 100.0 - 1, 100.0, quick=False) is None
    why = beyond_roof("n256_noncausal", 180.0, 100.0, quick=False)
    assert why is not None and why.startswith("n256_noncausal measured 180 GFLOP/s of useful work, 1.80x")
    assert beyond_roof("n32_causal", 900.0, 100.0, quick=True) is None  # quick mode: the plumbing dominates
    assert beyond_roof("n256_noncausal", 900.0, None, quick=False) is None  # no probe built here


def test_on_a_cpu_with_a_matrix_engine_the_bound_is_its_float32_accurate_rate() -> None:
    # An AMX-BF16 kernel that splits floats into bf16 parts passes the gate at 1.08x the FMA
    # probe on a Xeon guest with AMX tiles (examples/attention_c-run5), and a faster one is
    # honest work beyond any FMA: the bound there is the engine's peak over BF16_PER_FLOAT.
    from avo_target_attention_c.evaluate import MAX_ROOF, beyond_roof
    from avo_target_attention_c.roofline import BF16_PER_FLOAT

    amx = 3500.0  # measured: one core's bf16 tile peak, GFLOP/s
    assert beyond_roof("n2048_noncausal", 300.0, 220.0, quick=False) is not None  # 1.36x the FMA roof, no engine
    assert beyond_roof("n2048_noncausal", 300.0, 220.0, quick=False, matrix=amx) is None
    assert beyond_roof("n2048_noncausal", MAX_ROOF * amx / BF16_PER_FLOAT - 1, 220.0, False, amx) is None
    why = beyond_roof("n2048_noncausal", 2000.0, 220.0, quick=False, matrix=amx)
    assert why is not None and why.startswith("n2048_noncausal measured 2000 GFLOP/s of useful work, 1.71x the "
                                              "matrix engine's float32-accurate rate (1167 GFLOP/s")
    # An engine slower than the FMA roof (per float product) leaves the FMA bound in place.
    assert beyond_roof("n256_noncausal", 300.0, 220.0, quick=False, matrix=300.0) is not None
    assert "FMA roofline" in (beyond_roof("n256_noncausal", 300.0, 220.0, quick=False, matrix=300.0) or "")


def _cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def test_the_matrix_engine_is_measured_exactly_where_the_cpu_offers_one(tmp_path: Path) -> None:
    from avo_target_attention_c.roofline import Probe

    probe = Probe.build(tmp_path)
    assert probe is not None
    fma, amx = probe.best(), probe.matrix_best()
    if {"amx_tile", "amx_bf16"} <= _cpu_flags():
        # this host: the tiles' bf16 products run far beyond the FMA pipes (3.5 TFLOP/s
        # against 240 GFLOP/s measured on one core of a Xeon guest with AMX, 2026-12-04)
        assert amx is not None and amx > 4 * fma, (amx, fma)
    else:
        assert amx is None
    assert probe.best() > 0  # the FMA probe still runs after the tiles were used and released


def test_an_evaluation_whose_kernel_beats_the_roofline_fails_naming_it(
        candidate: Make, evaluate: Eval, monkeypatch: pytest.MonkeyPatch) -> None:
    # The measurement itself made implausible: this test's evaluator sees a thousandth of each
    # call's time, as a kernel doing its work off the clock would have it.
    import avo_target_attention_c.evaluate as ev
    from avo_target_attention_c.settings import BenchConfig

    one = plan(True).model_copy(update={"configs": [BenchConfig(heads=2, n=128, causal=False)], "quick": False})
    monkeypatch.setattr(ev, "plan", lambda quick: one)
    real = ev._candidate_time
    monkeypatch.setattr(ev, "_candidate_time", lambda cost, plumbing, threads: real(cost, plumbing, threads) / 1000)
    result = evaluate(candidate(SEED))
    assert not result.correct and result.error is not None
    assert result.error.startswith("not scored: faster than this machine can compute: n128_noncausal measured"), \
        result.error
