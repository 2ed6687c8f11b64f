"""Attacks on the judge, each with a real hostile kernel: it fails naming what was detected, or gains nothing.

The red team's holes (issue 13): work on a joined thread, a constructor that patches the
timer, an input-hash cache in /tmp across evaluations; and their relatives: a helper
thread that stays, child processes (waited for, or a double-forked daemon), computing
only the rows a checker might look at, and reading the target's own files.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from avo.models import EvalOptions, EvalResult
from avo.sandbox import probe
from conftest import PACKAGE, SEED, SIGNATURE, hostile

from avo_target_attention_c.evaluate import evaluate as run_evaluation

Make = Callable[..., Path]
Eval = Callable[[Path], EvalResult]

needs_bwrap = pytest.mark.skipif(not probe()[0], reason=f"bubblewrap cannot run here: {probe()[1]}")

JOB = """#include <pthread.h>
struct job { const float *q, *k, *v; float *out; int heads, n, d, causal; };
static void *work(void *arg)
{
    struct job *j = arg;
    honest(j->q, j->k, j->v, j->out, j->heads, j->n, j->d, j->causal);
    return NULL;
}
"""


def test_work_on_a_joined_thread_is_detected_and_named(candidate: Make, evaluate: Eval) -> None:
    # The red team's 4.15 (honest 0.69): the calling thread's clock did not see the helper.
    kernel = hostile(JOB, """    struct job j = {q, k, v, out, heads, n, d, causal};
    pthread_t t;
    if (pthread_create(&t, NULL, work, &j) == 0)
        pthread_join(t, NULL);
    else
        HONEST;""")
    result = evaluate(candidate(kernel, cflags="-pthread"))
    assert not result.correct and result.error is not None
    # Named by its CPU off the calling thread, or (at a gate shape too small for that) as
    # a task the sandbox's PID namespace counted that had ended by the audit.
    assert ("on a thread other than the calling one" in result.error
            and "that thread ended before the call returned" in result.error
            or "created 1 thread(s) or process(es) that ended before the audit" in result.error), result.error
    assert "1-thread mode allows no other threads" in result.error


def test_a_helper_thread_that_stays_is_a_failed_evaluation_naming_it(candidate: Make, evaluate: Eval) -> None:
    kernel = hostile(JOB + "#include <unistd.h>\nstatic void *idle(void *a) { (void)a; for (;;) pause(); }\n",
                     """    static int started;
    if (!started) { pthread_t t; pthread_create(&t, NULL, idle, NULL); started = 1; }
    HONEST;""")
    result = evaluate(candidate(kernel, cflags="-pthread"))
    assert not result.correct and result.error is not None
    assert result.error.startswith("the kernel started 1 thread(s) while running gate shape 1/18")


def test_work_in_a_child_process_is_detected(candidate: Make, evaluate: Eval) -> None:
    # out lives in shared memory, so a forked child's writes reach it; the child's CPU is not
    # the worker's own, but it is in the worker's reaped-children account, which is audited.
    kernel = hostile("#include <unistd.h>\n#include <sys/wait.h>\n", """    pid_t pid = fork();
    if (pid == 0) { HONEST; _exit(0); }
    if (pid > 0) waitpid(pid, NULL, 0); else HONEST;""")
    result = evaluate(candidate(kernel))
    assert not result.correct and result.error is not None
    # By its reaped CPU, or (at a gate shape too small to show a tick of it) as a task the
    # sandbox's PID namespace counted.
    assert ("child processes of the kernel that already ended used" in result.error
            or "created 1 thread(s) or process(es) that ended before the audit" in result.error), result.error
    assert "the kernel may not start processes" in result.error


@needs_bwrap
def test_a_double_forked_daemon_is_seen_and_dies_with_the_sandbox(candidate: Make, evaluate: Eval) -> None:
    kernel = hostile("#include <unistd.h>\n#include <sys/wait.h>\n", """    static int spawned;
    if (!spawned) {
        spawned = 1;
        pid_t pid = fork();
        if (pid == 0) {
            setsid();
            if (fork() == 0) for (;;) pause();  /* the daemon: a helper that outlives its parent */
            _exit(0);
        }
        waitpid(pid, NULL, 0);
    }
    HONEST;""")
    result = evaluate(candidate(kernel))
    assert not result.correct and result.error is not None
    assert "the kernel started 1 child process(es)" in result.error and "while running gate shape 1/18" in result.error


PATCH_TIMER = r"""#include <dlfcn.h>
__attribute__((constructor)) static void patch_the_timer(void)
{
    int (*py)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
    if (py == NULL)
        return;
    py("import sys, time\n"
       "for name in dir(time):\n"
       "    if name.endswith(('_ns', 'time', 'counter', 'monotonic')) and callable(getattr(time, name)):\n"
       "        setattr(time, name, lambda *a: 0)\n"
       "sys.stdout.write('HOSTILE: every clock in the worker now reads 0\\n'); sys.stdout.flush()\n");
}
"""


def test_a_constructor_that_patches_the_timer_gains_nothing(candidate: Make, evaluate: Eval,
                                                           capfd: pytest.CaptureFixture[str]) -> None:
    # The red team's 9.5-13.8 (honest 0.69): the timer lived in the worker. Now no clock is
    # there to patch; the kernel is the seed plus the patch, so it must score like the seed.
    honest = evaluate(candidate(SEED))
    patched = evaluate(candidate(hostile(PATCH_TIMER, "    HONEST;")))
    assert "HOSTILE: every clock in the worker now reads 0" in capfd.readouterr().err  # the patch did run
    assert honest.correct and patched.correct, patched.error
    h, p = (sum(r.metrics.values()) / len(r.metrics) for r in (honest, patched))
    # A patched clock read 0: the gain was unbounded (the red team's 14-20x). Timing noise
    # in quick mode is up to ~2x; a gain of 3x or more would be the attack working.
    assert p < 3 * h, (p, h)


def test_computing_only_some_rows_fails_on_rows_drawn_after_the_call(candidate: Make, evaluate: Eval) -> None:
    # Honest on the gate (no gate n is a multiple of 32), lazy on the benchmark shapes: the
    # first and the last row and every other row are right, the rest copy row 0.
    kernel = hostile("#include <string.h>\n", """    HONEST;
    if (n % 32 != 0) return;
    for (int h = 0; h < heads; h++)
        for (int i = 1; i < n - 1; i += 2)
            memcpy(out + ((size_t)h * n + i) * d, out + (size_t)h * n * d, (size_t)d * sizeof(float));""")
    result = evaluate(candidate(kernel))
    assert not result.correct and result.error is not None
    assert result.error.startswith(("timed call", "warm-up call")) and "outside the tolerance" in result.error
    assert "computes only some rows" in result.error


def test_the_target_package_cannot_be_read_from_the_kernel(candidate: Make, evaluate: Eval) -> None:
    # The references, the seeds' formula and the checks are all in the installed package;
    # a kernel that could open them would poison its output (a failed evaluation).
    files = [PACKAGE / "evaluate.py", PACKAGE / "reference.py", PACKAGE / "settings.py"]
    opens = " || ".join(f'access("{f}", R_OK) == 0' for f in files)
    kernel = hostile("#include <unistd.h>\n", f"""    HONEST;
    if ({opens}) out[0] = 0.0f / 0.0f;""")
    result = evaluate(candidate(kernel))
    assert result.correct, result.error


@needs_bwrap
def test_the_compiler_cannot_include_the_target_files(candidate: Make, evaluate: Eval) -> None:
    kernel = f'static const char leak[] = {{\n#include "{PACKAGE / "settings.py"}"\n}};\n' + SEED
    result = evaluate(candidate(kernel))
    assert not result.correct and result.error is not None
    assert "does not compile" in result.error and "No such file or directory" in result.error


def _state_probe(marker: str) -> str:
    """A kernel that fails loudly if it finds what a previous evaluation left, and aborts if it cannot leave it."""
    return hostile("#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <unistd.h>\n", f"""
    static int checked, stale;
    if (!checked) {{
        checked = 1;
        const char *home = getenv("HOME");
        char paths[3][512];
        snprintf(paths[0], sizeof paths[0], "/tmp/{marker}");
        snprintf(paths[1], sizeof paths[1], "%s/{marker}", home ? home : "/nonexistent");
        snprintf(paths[2], sizeof paths[2], "./{marker}");
        for (int i = 0; i < 3; i++)  /* $HOME is /tmp in the sandbox: look before writing any */
            if (access(paths[i], F_OK) == 0)
                stale = 1;
        for (int i = 0; i < 3; i++) {{
            FILE *fh = fopen(paths[i], "w");
            if (fh == NULL || fputs("cached", fh) < 0 || fclose(fh) != 0)
                abort();  /* the cache could not be written: the test would prove nothing */
        }}
    }}
    HONEST;
    if (stale)
        out[0] = 0.0f / 0.0f;  /* found a previous evaluation's state */""")


@needs_bwrap
def test_nothing_a_kernel_writes_survives_into_the_next_evaluation(candidate: Make, tmp_path: Path) -> None:
    # /tmp, $HOME and the working folder are written on the first evaluation (or it aborts)
    # and must be absent on the second: each would fail with a NaN if it found them.
    work = candidate(_state_probe(f"avo-probe-{uuid.uuid4().hex}"))
    options = EvalOptions(quick=True, secret="one run", log_dir=tmp_path / "logs")
    first = run_evaluation(work, options)
    second = run_evaluation(work, options)
    assert first.correct, first.error
    assert second.correct, second.error


CACHE = r"""#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
static uint64_t fnv(const void *p, size_t len, uint64_t h)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < len; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}
"""


def _input_cache(folder: str) -> str:
    """The red team's kernel: outputs stored in /tmp under a hash of the inputs, replayed on a hit."""
    return hostile(CACHE, f"""    size_t size = (size_t)heads * n * d;
    size_t probe = size < 256 ? size : 256;  /* the leading inputs identify a call: cheap to hash */
    uint64_t key = fnv(q, probe * 4, fnv(k, probe * 4, fnv(v, probe * 4, 1469598103934665603ull ^ causal)));
    key = fnv(&size, sizeof size, key);
    char path[256];
    mkdir("{folder}", 0700);
    snprintf(path, sizeof path, "{folder}/%016llx", (unsigned long long)key);
    FILE *fh = fopen(path, "rb");
    if (fh != NULL) {{
        size_t got = fread(out, sizeof(float), size, fh);
        fclose(fh);
        if (got == size) return;  /* a hit: no work at all */
    }}
    HONEST;
    fh = fopen(path, "wb");
    if (fh != NULL) {{ fwrite(out, sizeof(float), size, fh); fclose(fh); }}""")


@needs_bwrap
def test_an_input_hash_cache_across_evaluations_gains_nothing(candidate: Make, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # The red team's 14.5 on submit after 0.59 on avo-eval (honest 0.69). The same tree in
    # the same run replays the same inputs (reproducibility), so only a fresh /tmp per
    # evaluation stops the replay; the control without the sandbox shows the attack is live.
    monkeypatch.setenv("AVO_ATTENTION_C_CALL_TIMEOUT", "3")
    folder = f"/tmp/avo-attc-cache-{uuid.uuid4().hex}"
    work = candidate(_input_cache(folder))
    options = EvalOptions(quick=True, secret="one run", log_dir=tmp_path / "logs")
    mean = lambda r: sum(r.metrics.values()) / len(r.metrics)  # noqa: E731
    first, second = run_evaluation(work, options), run_evaluation(work, options)
    assert first.correct and second.correct, (first.error, second.error)
    assert mean(second) < 3 * mean(first), (mean(first), mean(second))
    assert not Path(folder).exists()  # it lived in the sandbox's own /tmp
    # Control: with no sandbox /tmp is the host's, and the second evaluation replays it.
    monkeypatch.setenv("AVO_SANDBOX", "none")
    try:
        first, second = run_evaluation(work, options), run_evaluation(work, options)
        assert first.correct and second.correct, (first.error, second.error)
        assert mean(second) > 3 * mean(first), (mean(first), mean(second))
    finally:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def test_a_thread_that_keeps_working_after_the_call_returns_is_detected(
        candidate: Make, evaluate: Eval, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two threads per side allow threads, timed on the wall clock; work done after the
    # reply would be off that clock, so CPU used between calls is audited.
    monkeypatch.setenv("AVO_ATTENTION_C_THREADS", "2")
    kernel = hostile("#include <pthread.h>\nstatic void *spin(void *a) { for (volatile long i = 0;; i++) {} "
                     "return a; }\n", """    static int started;
    if (!started) { pthread_t t; pthread_create(&t, NULL, spin, NULL); started = 1; }
    HONEST;""")
    result = evaluate(candidate(kernel, cflags="-pthread"))
    assert not result.correct and result.error is not None
    assert result.error.startswith("the kernel kept running after it returned")


# A SIGALRM handler the kernel installs runs on the worker's own (only) thread while the worker
# waits for its next request: CPU between a reply and the next request, off the clock.
ALARM = """#include <signal.h>
#include <sys/time.h>
#include <time.h>
static double thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static volatile sig_atomic_t in_call;
static void later(void)
{
    struct itimerval it = {{0, 0}, {0, 200}}; /* once, 0.2 ms from now */
    setitimer(ITIMER_REAL, &it, NULL);
}
static void burn(int sig)
{
    (void)sig;
    if (in_call) { /* the next request came within 0.2 ms: wait for a gap instead */
        later();
        return;
    }
    const double until = thread_cpu() + 0.004; /* 4 ms of CPU, twice the per-gap limit */
    while (thread_cpu() < until) {}
}
static int calls;
static void arm(void)
{
    struct sigaction sa = {0};
    sa.sa_handler = burn;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    later();
}
"""


def test_cpu_in_one_gap_between_calls_costs_only_that_pair_and_is_reported(candidate: Make, evaluate: Eval) -> None:
    # What a host that steals the vCPU looks like from outside (measured: 4.1 ms in one gap of
    # an honest v1 evaluation, which then failed as if the kernel had kept running).
    kernel = hostile(ALARM, "    in_call = 1;\n    HONEST;\n    if (++calls == 30) arm();\n    in_call = 0;")
    result = evaluate(candidate(kernel))
    assert result.correct, result.error
    assert result.notes is not None
    # The handler's 4 ms lands in a gap (that call is left out) or, when it fires before the
    # evaluator has checked the call's output, is charged to that call (Worker.settle): one
    # pair either way, and the notes say which.
    lines = result.notes.splitlines()
    left = next((x for x in lines if "timed call(s) left out" in x), "")
    charged = next((x for x in lines if "timed call(s) charged CPU" in x), "")
    gaps = re.match(r"([12]) timed call\(s\) left out: the worker used ([\d., ]+) ms of CPU", left)
    late = re.search(r"up to ([\d.]+) ms$", charged)
    assert gaps or late, result.notes
    assert (gaps and any(float(g) >= 3.9 for g in gaps[2].split(", "))) or (late and float(late[1]) >= 3.9), \
        (left, charged)


def test_cpu_between_calls_again_and_again_is_still_a_failure(candidate: Make, evaluate: Eval) -> None:
    kernel = hostile(ALARM, "    in_call = 1;\n    HONEST;\n    if (++calls >= 30) arm();\n    in_call = 0;")
    result = evaluate(candidate(kernel))
    assert not result.correct and result.error is not None
    assert result.error.startswith("the kernel kept running after it returned:"), result.error
    assert "3 times" in result.error and "2 such gaps are tolerated per evaluation" in result.error


def _shipped_v1(tmp_path: Path) -> str:
    """Round three's v1 kernel.c (a fast kernel, ~0.15-0.3 ms a call at 8 heads of 128)."""
    import subprocess

    bundle = Path(__file__).resolve().parents[2] / "examples" / "attention_c-run3" / "lineage.bundle"
    subprocess.run(["git", "clone", "-q", str(bundle), str(tmp_path / "run3")], check=True)
    return subprocess.run(["git", "-C", str(tmp_path / "run3"), "show", "v1:kernel.c"], check=True,
                          capture_output=True, text=True).stdout


def _around_v1(v1: str, prelude: str, body: str) -> str:
    """A hostile kernel around round three's v1, as :func:`conftest.hostile` is around the seed."""
    body = body.replace("HONEST", "honest(q, k, v, out, heads, n, d, causal)")
    return ("#define _GNU_SOURCE\n" + v1.replace("void attention(", "static void honest(") + prelude
            + f"{SIGNATURE}\n{{\n{body}\n}}\n")


def _v1_and(candidate: Make, evaluate: Eval, v1: str, cheat: str) -> tuple[EvalResult, EvalResult]:
    """The honest v1 and ``cheat`` evaluated one after the other, with v1's flags."""
    flags = "-march=native -pthread"
    return evaluate(candidate(v1, cflags=flags)), evaluate(candidate(cheat, cflags=flags))


def _one_timed_config(monkeypatch: pytest.MonkeyPatch, causal: bool) -> None:
    """Full-mode timing of one config, 8 heads of 128, in a few seconds."""
    import avo_target_attention_c.evaluate as ev
    from avo_target_attention_c.settings import BenchConfig, plan

    one = plan(False).model_copy(update={"configs": [BenchConfig(heads=8, n=128, causal=causal)], "rounds": 1,
                                         "min_pairs": 16, "max_pairs": 40, "min_time": 0.2, "max_time": 2.0})
    monkeypatch.setattr(ev, "plan", lambda quick: one)


# Inputs used to be written into the shared memory before the reference-first pair's NumPy
# call: for the 3-25 ms that took, the worker idled with the next call's inputs in reach. A
# timer's signal handler (on the worker's only thread, so no thread to find) computed out
# then, under the 2 ms of CPU a gap may show, and the call itself returned at once.
PRECOMPUTE = """#include <math.h>
#include <signal.h>
#include <sys/time.h>
static const float *Q, *K, *V;
static float *O;
static int H, N, Dd, C;
static volatile sig_atomic_t done, in_call;
static void early(int sig)
{
    (void)sig;
    size_t last = (size_t)H * N * Dd - 1;
    if (in_call || O == NULL || done || !isnan(O[0]) || !isnan(O[last]))
        return; /* no fresh inputs yet: out still holds the last result */
    honest(Q, K, V, O, H, N, Dd, C);
    done = 1;
}
"""
PRECOMPUTE_BODY = """    static int armed, same;
    in_call = 1; /* the handler stands aside during the kernel's own call */
    same = (Q == q && H == heads && N == n && C == causal) ? same + 1 : 0;
    if (!(done && same))
        HONEST;
    done = 0;
    Q = q; K = k; V = v; O = out; H = heads; N = n; Dd = d; C = causal;
    if (!armed && same >= 2) { /* past the gate: the timed calls repeat one shape */
        struct sigaction sa = {0};
        sa.sa_handler = early;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGALRM, &sa, NULL);
        struct itimerval it = {{0, 200}, {0, 200}};
        setitimer(ITIMER_REAL, &it, NULL);
        armed = 1;
    }
    in_call = 0;"""


def test_a_signal_handler_that_computes_out_before_the_call_gains_nothing(
        candidate: Make, evaluate: Eval, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Around a fast kernel (round three's v1), whose work fits in what a gap may use.
    v1 = _shipped_v1(tmp_path)
    sneaky = _around_v1(v1, PRECOMPUTE, PRECOMPUTE_BODY)
    # One config of 8 heads of 128, causal: ~0.15 ms a call, well inside a gap's 2 ms and the
    # 0.5 ms a call may show off its thread, and well above the plumbing's noise.
    _one_timed_config(monkeypatch, causal=True)
    honest, cheat = _v1_and(candidate, evaluate, v1, sneaky)
    assert honest.correct, honest.error
    if not cheat.correct:  # its handler caught running between a put and a call, three times
        assert cheat.error is not None and cheat.error.startswith("the kernel kept running after it returned")
        return
    gain = cheat.metrics["n128_causal"] / honest.metrics["n128_causal"]
    assert gain < 1.5, (gain, honest.metrics, cheat.metrics)


# Work finished after the reply: in every pair where the kernel runs first (the timed calls of a
# config alternate, the warm-up call before them: the kernel counts), the call computes half the
# heads and returns; a one-shot timer 0.2 ms later computes the rest on the worker's only thread
# while the evaluator times the twin's empty call and NumPy, before it checks out. Each gap's CPU
# stayed under the 2 ms a gap may show and the total under the quarter of the calls' CPU the audit
# allowed, so no clock saw that work: measured before the fix, 1.19x the honest kernel.
LATE = """#include <signal.h>
#include <sys/time.h>
static const float *Q, *K, *V;
static float *O;
static int H, N, Dd, C, calls;
static void finish(int sig)
{
    (void)sig;
    int half = H / 2;
    size_t off = (size_t)half * N * Dd;
    honest(Q + off, K + off, V + off, O + off, H - half, N, Dd, C);
}
"""
LATE_BODY = """    if (heads != H || n != N || causal != C) calls = 0; /* a new config: its warm-up call */
    Q = q; K = k; V = v; O = out; H = heads; N = n; Dd = d; C = causal;
    if (heads < 4 || ++calls < 3 || calls % 2 == 0) { HONEST; return; } /* NumPy goes first: no time */
    struct sigaction sa = {0};
    sa.sa_handler = finish;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    honest(q, k, v, out, heads / 2, n, d, causal);
    struct itimerval it = {{0, 0}, {0, 200}};
    setitimer(ITIMER_REAL, &it, NULL);"""


def test_work_a_timer_finishes_after_the_reply_is_charged_to_the_call(
        candidate: Make, evaluate: Eval, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v1 = _shipped_v1(tmp_path)
    _one_timed_config(monkeypatch, causal=False)
    honest, cheat = _v1_and(candidate, evaluate, v1, _around_v1(v1, LATE, LATE_BODY))
    assert honest.correct, honest.error
    assert cheat.correct, cheat.error  # nothing forbidden: the work is simply the call's
    gain = cheat.metrics["n128_noncausal"] / honest.metrics["n128_noncausal"]
    assert gain < 1.1, (gain, honest.metrics, cheat.metrics)
    assert cheat.notes is not None and "charged" in cheat.notes


# A kernel that serves the worker's requests itself: on its first call at a timed shape it never
# returns, and answers every request after it from C, on the worker's socket (its descriptor is
# on the worker's command line), in a few microseconds. What the evaluator subtracted from each
# call was an empty call through the worker's Python request loop (64 us here), so each call lost
# some 50 us it never spent: measured before the fix, 1.3x the honest kernel. Now every timed
# call goes through a request loop in C of the evaluator's own, in both workers: a kernel's own
# loop has nothing left to save (or, speaking another protocol, answers nothing right).
SELF_SERVE = r"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static int sock_fd(void)
{
    char buf[4096];
    FILE *f = fopen("/proc/self/cmdline", "rb");
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = 0;
    int i = 0;
    for (char *p = buf; p < buf + len; p += strlen(p) + 1, i++)
        if (i == 3) return atoi(p); /* python -I worker.py SOCKET_FD ... */
    return -1;
}
static int field(const char *line, const char *key)
{
    const char *p = strstr(line, key);
    return p ? atoi(p + strlen(key)) : 0;
}
static void serve(const float *q, const float *k, const float *v, float *out)
{
    static const char ok[] = "{\"ok\": true}\n";
    int fd = sock_fd();
    char line[8192];
    size_t used = 0;
    if (write(fd, ok, sizeof ok - 1) < 0) _exit(1); /* the answer to the call that got us here */
    for (;;) {
        ssize_t got = read(fd, line + used, sizeof line - 1 - used);
        if (got <= 0) _exit(0);
        used += (size_t)got;
        line[used] = 0;
        char *nl;
        while ((nl = memchr(line, '\n', used)) != NULL) {
            *nl = 0;
            if (strstr(line, "\"op\": \"call\""))
                honest(q, k, v, out, field(line, "\"heads\": "), field(line, "\"n\": "), 64,
                       strstr(line, "\"causal\": true") != NULL);
            if (write(fd, ok, sizeof ok - 1) < 0) _exit(1);
            size_t rest = used - (size_t)(nl + 1 - line);
            memmove(line, nl + 1, rest);
            used = rest;
        }
    }
}
"""


def test_a_kernel_that_serves_the_requests_itself_gains_nothing(
        candidate: Make, evaluate: Eval, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v1 = _shipped_v1(tmp_path)
    server = _around_v1(v1, SELF_SERVE, "    HONEST;\n    if (heads >= 8) serve(q, k, v, out);")
    _one_timed_config(monkeypatch, causal=False)
    honest, cheat = _v1_and(candidate, evaluate, v1, server)
    assert honest.correct, honest.error
    if cheat.correct:
        gain = cheat.metrics["n128_noncausal"] / honest.metrics["n128_noncausal"]
        assert gain < 1.1, (gain, honest.metrics, cheat.metrics)


IRQ_WORK = r"""#include <errno.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
static int made; /* kernel objects that would do work in interrupt context: none may be made */
__attribute__((constructor)) static void arm(void)
{
    int fds[2];
    timer_t t;
    int tfd = timerfd_create(CLOCK_MONOTONIC, 0), ep = epoll_create1(0);
    int uring = (int)syscall(425, 8, (void *)0);  /* io_uring_setup with no params: EFAULT if allowed */
    made = (tfd >= 0) + (ep >= 0) + (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0)
         + (timer_create(CLOCK_MONOTONIC, 0, &t) == 0) + (uring >= 0 || errno == EFAULT);
#if defined(__x86_64__)
    long r; /* the same through the 32-bit system call table: timerfd_create is 322 there */
    __asm__ volatile("int $0x80" : "=a"(r) : "a"(322L), "b"(1L), "c"(0L) : "memory");
    made += r >= 0;
#endif
    fprintf(stderr, "IRQ-WORK: %d made\n", made);
}
"""


def test_a_kernel_cannot_make_timers_that_charge_interrupt_work_to_the_reference(
        candidate: Make, evaluate: Eval, capfd: pytest.CaptureFixture[str]) -> None:
    # Round seven of the red team: on a Linux kernel without IRQ time accounting, interrupt time is
    # charged to whichever thread is on the CPU, and with one thread per side that is NumPy's,
    # timed on the same CPU. A kernel armed one-shot timerfds, each watched 2,500 times through
    # epoll, to fire while NumPy ran: run six's v2 (honest 6.5) scored 9.5-10.8, every check passed.
    # Timers, epoll, io_uring and sockets are refused to the worker before the kernel's library is
    # loaded; the kernel here makes its output wrong for every one it gets.
    kernel = hostile(IRQ_WORK, "    HONEST;\n    if (made) out[0] = -1e30f;")
    result = evaluate(candidate(kernel))
    assert "IRQ-WORK: 0 made" in capfd.readouterr().err
    assert result.correct, result.error
