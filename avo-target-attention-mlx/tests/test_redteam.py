"""Held-out red team after issue 13: attacks on attention_mlx the project had not tried."""

from __future__ import annotations

from pathlib import Path

from mlx_target_helpers import evaluate, write_candidate


def test_a_forked_child_reaped_by_the_kernel_on_another_cpu_is_caught(tmp_path: Path) -> None:
    # test_a_forked_child_doing_work_per_call_is_caught waits for its child, so the child's
    # CPU shows in the worker's cutime. With SIGCHLD ignored the kernel reaps the child
    # itself: its CPU is added to nobody, and a child that moved to another CPU and ended
    # before the audit is not in the live tree the pinning check walks. Such a child can do
    # half of every call in parallel, off the pinned core the wall clock is read on.
    source = """
        import os, signal, time
        import mlx.core as mx
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        OTHER = set(range(os.cpu_count() or 1)) - os.sched_getaffinity(0) or os.sched_getaffinity(0)
        def decode_attention(q, k, v, scale):
            pid = os.fork()
            if pid == 0:
                os.sched_setaffinity(0, OTHER)
                end = time.process_time() + 0.002
                while time.process_time() < end:
                    pass
                os._exit(0)
            out = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            return out
        """
    result = evaluate(write_candidate(tmp_path, source))
    assert result["correct"] is False, f"work in auto-reaped children went unnoticed: {result['metrics']}"
    assert "not allowed" in (result["error"] or ""), result["error"]
