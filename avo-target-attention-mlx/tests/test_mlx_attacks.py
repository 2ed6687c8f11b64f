"""Attacks on the evaluator, each by a real hostile candidate (issue 13).

The candidate runs in its own sandboxed worker; the references, the inputs' seeds and the
clock are in the evaluator. Each attack here worked against the in-process evaluator; now
each fails, or gains nothing, with a message that says what was detected.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
from mlx_target_helpers import evaluate, write_candidate

from avo.sandbox import current_level


def scalar(result: dict) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in result["metrics"].values()))


def test_patching_the_evaluators_classes_is_impossible_and_gains_nothing(tmp_path: Path) -> None:
    # The red team's 20x: patch the suite's class so every check passes and SDPA looks slow.
    # The package is hidden inside the sandbox; if the import failed the candidate returns
    # zeros, which the evaluator (in another process) rejects.
    source = """
        import mlx.core as mx
        try:
            from avo_target_attention_mlx import harness
            harness.Suite._error = lambda *a, **k: 0.0
            PATCHED = True
        except ImportError:
            PATCHED = False
        def decode_attention(q, k, v, scale):
            if PATCHED:
                return mx.zeros_like(q)
            return mx.zeros_like(q) + 1.0  # fails the gate unless the evaluator was patched
        """
    result = evaluate(write_candidate(tmp_path, source))
    assert result["correct"] is False
    assert "is over the budget" in result["error"], result["error"]


def test_patching_the_worker_to_answer_without_computing_is_caught(tmp_path: Path) -> None:
    # The worker harness shares the candidate's process, so it can be rewritten: here its
    # call answers at once without running anything. The output buffer stays poisoned.
    source = """
        import sys
        import mlx.core as mx
        Worker = sys.modules["__main__"].Worker
        Worker.call = lambda self, msg: {"ok": True, "copy_s": 10.0}
        def decode_attention(q, k, v, scale):
            return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)
        """
    result = evaluate(write_candidate(tmp_path, source))
    assert result["correct"] is False
    assert "left the output buffer unwritten" in result["error"], result["error"]


def test_walking_gc_finds_no_reference_outputs(tmp_path: Path) -> None:
    # The red team's 70-183x: find the float64 reference outputs with gc and return them.
    # They live in the evaluator's process; the worker holds none.
    source = """
        import gc
        import mlx.core as mx
        def decode_attention(q, k, v, scale):
            import numpy as np
            found = [o for o in gc.get_objects()
                     if isinstance(o, np.ndarray) and o.dtype == np.float64 and o.shape == tuple(q.shape)]
            if found:
                return mx.array(found[-1].astype(np.float32))
            return mx.zeros_like(q)
        """
    result = evaluate(write_candidate(tmp_path, source))
    assert result["correct"] is False
    assert "is over the budget" in result["error"], result["error"]


def test_an_atexit_result_line_with_forged_notes_is_ignored(tmp_path: Path) -> None:
    # The red team's 50: a result line printed at exit. The worker's stdout is only a log,
    # the evaluator's result travels on avo's private pipe, and the worker is killed.
    source = """
        import atexit, json, os, sys
        import mlx.core as mx
        line = json.dumps({"correct": True, "metrics": {"L1k_gqa4_d64": 50.0, "L2k_b2_mha4_d64": 50.0,
                           "L4k_mqa4_d64": 50.0}, "notes": "FORGED notes"})
        def _forge():
            print(line)
            sys.stdout.flush()
            os.write(1, (line + "\\n").encode())
        atexit.register(_forge)
        def decode_attention(q, k, v, scale):
            print(line)  # on every call, too
            return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)
        """
    result = evaluate(write_candidate(tmp_path, source))
    assert result["correct"] is True, result.get("error")
    assert "FORGED" not in (result.get("notes") or "")
    assert all(v < 5.0 for v in result["metrics"].values()), result["metrics"]


CACHE_PROBE = """
    import os
    import mlx.core as mx
    SPOTS = [os.path.join("/tmp", "avo-cache"), os.path.join(os.path.expanduser("~"), ".avo-cache"),
             os.path.join(os.getcwd(), "avo-cache"), os.path.join(os.path.dirname(__file__), "avo-cache"),
             os.path.join("/dev/shm", "avo-cache")]
    for spot in SPOTS:
        if os.path.exists(spot):
            raise RuntimeError(f"found a cache an earlier evaluation left at {spot}")
    for spot in SPOTS:
        try:
            with open(spot, "w") as fh:
                fh.write("outputs of the last evaluation")
        except OSError:
            pass
    def decode_attention(q, k, v, scale):
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)
    """


def test_no_state_survives_an_evaluation(tmp_path: Path) -> None:
    # The attention_c red team's cache: write outputs on one evaluation, read them on the
    # next (the same candidate gets the same inputs, so a surviving cache would pay off).
    # /tmp, $HOME, the scratch copy of the candidate and /dev/shm are fresh per evaluation.
    if current_level() != "bwrap":
        pytest.fail("this machine cannot run the bubblewrap sandbox; without it /tmp survives evaluations")
    work = write_candidate(tmp_path, CACHE_PROBE)
    first = evaluate(work)
    second = evaluate(work)
    assert first["correct"] is True, first.get("error")
    assert second["correct"] is True, second.get("error")
    assert sorted(p.name for p in work.iterdir()) == ["attention.py"]  # the candidate's folder is untouched


def test_a_helper_thread_left_running_is_named(tmp_path: Path) -> None:
    source = """
        import threading, queue
        import mlx.core as mx
        jobs, done = queue.Queue(), queue.Queue()
        def _helper():
            while True:
                q, k, v, s = jobs.get()
                out = mx.fast.scaled_dot_product_attention(q, k, v, scale=s)
                mx.eval(out)
                done.put(out)
        threading.Thread(target=_helper, daemon=True).start()
        def decode_attention(q, k, v, scale):
            jobs.put((q, k, v, scale))
            return done.get()
        """
    result = evaluate(write_candidate(tmp_path, source))
    assert result["correct"] is False
    assert "started threads it was not allowed" in result["error"], result["error"]


def test_a_helper_thread_joined_inside_each_call_is_caught(tmp_path: Path) -> None:
    # Gone before any snapshot: what gives it away is the CPU its ended threads used.
    source = """
        import threading
        import mlx.core as mx
        def decode_attention(q, k, v, scale):
            box = []
            def work():
                x = 0
                for i in range(300000):  # work off the main thread (pure Python: no MLX stream)
                    x += i
                box.append(x)
            t = threading.Thread(target=work)
            t.start()
            t.join()
            return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)
        """
    result = evaluate(write_candidate(tmp_path, source))
    assert result["correct"] is False
    # By the CPU its ended threads used, or at once by the task its sandbox's PID namespace counted.
    assert ("started threads it was not allowed" in result["error"]
            and "threads that have already ended used" in result["error"]
            or "started threads or processes it was not allowed" in result["error"]), result["error"]


def test_a_helper_process_is_named(tmp_path: Path) -> None:
    source = """
        import subprocess, sys
        import mlx.core as mx
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        def decode_attention(q, k, v, scale):
            return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)
        """
    result = evaluate(write_candidate(tmp_path, source))
    assert result["correct"] is False
    assert "started 1 process(es) it was not allowed" in result["error"], result["error"]


def test_a_forked_child_doing_work_per_call_is_caught(tmp_path: Path) -> None:
    source = """
        import os
        import mlx.core as mx
        def decode_attention(q, k, v, scale):
            pid = os.fork()
            if pid == 0:
                x = 0
                for i in range(300000):
                    x += i
                os._exit(0)
            os.waitpid(pid, 0)
            return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)
        """
    result = evaluate(write_candidate(tmp_path, source))
    assert result["correct"] is False
    assert ("started processes it was not allowed" in result["error"]
            or "started threads or processes it was not allowed" in result["error"]), result["error"]


def test_leaving_the_pinned_cpu_is_caught(tmp_path: Path) -> None:
    source = """
        import os
        import mlx.core as mx
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)) | {0, 1})
        def decode_attention(q, k, v, scale):
            return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)
        """
    if len(__import__("os").sched_getaffinity(0)) < 2:
        pytest.fail("needs two CPUs to leave one")
    result = evaluate(write_candidate(tmp_path, source))
    assert result["correct"] is False
    assert "changed its CPU pinning" in result["error"], result["error"]


def test_work_between_calls_is_caught(tmp_path: Path) -> None:
    # A timer signal runs a 3 ms handler on the main thread every 10 ms, also while the worker
    # waits for its next request: as a candidate polling the shared inputs to start early
    # would (or one slowing the reference down).
    source = """
        import signal, time
        import mlx.core as mx
        def _poll(signum, frame):
            end = time.perf_counter() + 0.003
            while time.perf_counter() < end:
                pass
        signal.signal(signal.SIGALRM, _poll)
        signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)
        def decode_attention(q, k, v, scale):
            return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)
        """
    result = evaluate(write_candidate(tmp_path, source))
    assert result["correct"] is False
    # CPU is sampled from /proc in 10 ms ticks, and the handler also fires inside calls: which
    # side of a call a tick is charged to is chance, so either CPU check may be the one that
    # trips (CI once saw 0.06 s charged to 0.03 s of calls). Both name CPU the calls did not do.
    assert ("of CPU between its calls" in result["error"]
            or "s of calls on one pinned CPU: work ran in parallel elsewhere" in result["error"]), result["error"]


def test_timed_calls_are_checked_on_every_row(tmp_path: Path) -> None:
    # Honest on the first two calls of each shape (gate and warm-up), then only the first
    # query head is computed: the timed outputs are checked too, on every row.
    source = """
        import mlx.core as mx
        seen = {}
        def decode_attention(q, k, v, scale):
            n = seen[q.shape] = seen.get(q.shape, 0) + 1
            out = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)
            if n <= 2:
                return out
            keep = mx.zeros(q.shape[1]).at[0].add(1.0).reshape(1, -1, 1, 1)
            return out * keep
        """
    result = evaluate(write_candidate(tmp_path, source))
    assert result["correct"] is False
    assert "timed call 1's (timed outputs are checked too) error" in result["error"], result["error"]
