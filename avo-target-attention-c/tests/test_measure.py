"""Scoring machinery: thread settings, baselines, the pair loop's other candidates."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from avo.models import EvalOptions, EvalResult
from conftest import SEED

from avo_target_attention_c.build import compile_kernel
from avo_target_attention_c.evaluate import baselines, choose_clock, measure
from avo_target_attention_c.sandbox import Sandbox
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
    assert "wall-clock time" in result.notes
    cpus = result.notes.split("pinned to CPU ", 1)[1].split(")", 1)[0]
    assert len(cpus.split(",")) == min(2, len(os.sched_getaffinity(0)))


def test_a_bad_thread_setting_is_a_clear_failure(candidate: Make, evaluate: Eval,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AVO_ATTENTION_C_THREADS", "zero")
    result = evaluate(candidate(SEED))
    assert not result.correct
    assert result.error == "AVO_ATTENTION_C_THREADS must be a positive number, got 'zero'"


def test_the_pair_loop_measures_another_library_with_checked_outputs(candidate: Make, tmp_path: Path) -> None:
    # The torch baseline goes through this path with who="torch"; torch is not installed
    # here, so the same path is exercised with NumPy itself as the "other library".
    p = plan(quick=True)
    build = compile_kernel(candidate(SEED), tmp_path / "build")
    with Sandbox(1) as box:
        box.request("load", (str(build.library),), 60.0, "loading")
        metrics, spread, lines = measure(box, p, "numpy", check=True, report=lambda _: None)
    assert set(metrics) == {c.key for c in p.configs}
    assert all(v > 0 for v in metrics.values()) and set(spread) == set(metrics)
    assert lines[0].split()[:2] == ["config", "speedup"] and len(lines) == 1 + len(p.configs)


def test_baselines_report_numpy_as_parity_and_explain_a_missing_torch() -> None:
    results = baselines(EvalOptions(quick=True))
    numpy = results["numpy"]
    assert numpy.correct and set(numpy.metrics.values()) == {1.0}
    assert set(numpy.metrics) == {c.key for c in plan(quick=True).configs}
    if importlib.util.find_spec("torch") is None:
        assert set(results) == {"numpy"}
        assert numpy.notes is not None and "torch is not installed" in numpy.notes
    else:  # pragma: no cover - not installed on the machine these tests were written on
        assert results["torch_sdpa"].correct, results["torch_sdpa"].error


def reply(threads: int, children: int = 0) -> dict[str, int]:
    return {"threads": threads, "base_threads": 1, "children": children}


def test_cpu_time_is_used_unless_the_kernel_works_off_its_thread() -> None:
    assert choose_clock([reply(1), reply(1)], threads=1) == ("c", None)
    clock, why = choose_clock([reply(1), reply(3)], threads=1)
    assert clock == "t" and why is not None and "started 2 extra thread(s)" in why
    clock, why = choose_clock([reply(1, children=1)], threads=1)
    assert clock == "t" and why is not None and "1 child process(es)" in why
    assert choose_clock([reply(1)], threads=2) == ("t", None)


def test_a_kernel_with_a_helper_thread_is_timed_on_the_wall_clock(candidate: Make, evaluate: Eval) -> None:
    helper = SEED.replace("#include <stdlib.h>\n", """#include <stdlib.h>
#include <pthread.h>
static void *idle(void *arg) { (void)arg; for (;;) pause(); return NULL; }
""").replace("#include <math.h>\n", "#include <math.h>\n#include <unistd.h>\n")
    helper = helper.replace("    const float scale = 1.0f / sqrtf((float)d);\n", """    static int started;
    if (!started) { pthread_t t; pthread_create(&t, NULL, idle, NULL); started = 1; }
    const float scale = 1.0f / sqrtf((float)d);
""", 1)
    result = evaluate(candidate(helper, cflags="-pthread"))
    assert result.correct, result.error
    assert result.notes is not None
    assert "started 1 extra thread(s)" in result.notes and "scored on wall-clock time" in result.notes
