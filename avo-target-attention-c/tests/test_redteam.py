"""Held-out red team after issue 13: attacks on attention_c the project had not tried."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from avo.models import EvalResult
from conftest import SEED, hostile

Make = Callable[..., Path]
Eval = Callable[[Path], EvalResult]


def test_work_in_a_child_reaped_by_the_kernel_itself_is_detected(candidate: Make, evaluate: Eval) -> None:
    # test_work_in_a_child_process_is_detected waits for its child, so the child's CPU lands
    # in the worker's cutime, which is audited. With SIGCHLD ignored the kernel reaps the
    # child itself and adds its CPU to nobody: waitpid() blocks (no CPU) until it is gone,
    # the child wrote `out` through the shared mapping, and the call costs a fork.
    prelude = "#include <signal.h>\n#include <unistd.h>\n#include <sys/wait.h>\n"
    kernel = hostile(prelude, """    signal(SIGCHLD, SIG_IGN);
    pid_t pid = fork();
    if (pid == 0) { HONEST; _exit(0); }
    if (pid > 0) waitpid(pid, NULL, 0); else HONEST;""")
    cheat = evaluate(candidate(kernel))
    honest = evaluate(candidate(SEED))
    assert honest.correct, honest.error
    assert not cheat.correct, (f"a kernel whose work ran in an auto-reaped child was accepted: {cheat.metrics} "
                               f"against the honest {honest.metrics}")
    assert "may not start processes" in (cheat.error or ""), cheat.error
