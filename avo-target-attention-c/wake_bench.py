"""How late a sleeping helper thread joins a call on this host: the bound on two threads' speedup.

A 2-thread kernel may not keep a thread spinning between calls (the evaluator charges and then
refuses CPU used between calls), so each call starts by waking a helper that sleeps on a futex
on the other CPU, and the caller works alone until it joins. For a call that takes ``T1`` on one
thread and a helper that joins ``L`` late, two threads take at least ``(T1 + L) / 2``: a speedup
of at most ``2 T1 / (T1 + L)``. This measures ``L`` with the evaluator's pattern (a wake every
few milliseconds, both CPUs idle in between), and, for scale, a wake that follows 50 us later
and a helper that spins instead of sleeping (what the evaluator does not allow).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SOURCE = r"""
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static atomic_int flag;
static atomic_long got;
static int spin, helper_cpu;
static long now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000L + t.tv_nsec;
}
static void pin(int c) {
    cpu_set_t s; CPU_ZERO(&s); CPU_SET(c, &s); pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}
static void *helper(void *a) {
    (void)a; pin(helper_cpu); int seen = 0;
    for (;;) {
        while (atomic_load(&flag) == seen) {
            if (spin) __builtin_ia32_pause();
            else syscall(SYS_futex, &flag, FUTEX_WAIT_PRIVATE, seen, 0, 0, 0);
        }
        seen = atomic_load(&flag);
        atomic_store(&got, now());
        if (seen < 0) return 0;
    }
}
static int cmp(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b; return x < y ? -1 : x > y;
}
int main(int argc, char **argv) {
    int gap_us = atoi(argv[1]), n = atoi(argv[3]), caller_cpu = atoi(argv[4]);
    spin = atoi(argv[2]); helper_cpu = atoi(argv[5]);
    pin(caller_cpu);
    pthread_t h; pthread_create(&h, 0, helper, 0);
    long *lat = malloc(n * sizeof(long));
    for (int i = 0; i < n; i++) {
        struct timespec g = {0, gap_us * 1000L}; nanosleep(&g, 0);
        atomic_store(&got, 0);
        long t0 = now();
        atomic_fetch_add(&flag, 1);
        if (!spin) syscall(SYS_futex, &flag, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
        while (atomic_load(&got) == 0) __builtin_ia32_pause();
        lat[i] = atomic_load(&got) - t0;
    }
    qsort(lat, n, sizeof(long), cmp);
    printf("%.2f %.2f %.2f\n", lat[n / 10] / 1e3, lat[n / 2] / 1e3, lat[9 * n / 10] / 1e3);
    atomic_store(&flag, -1); syscall(SYS_futex, &flag, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
    return 0;
}
"""

CASES = (("futex wake, every 2 ms (the evaluator's pattern)", 2000, 0),
         ("futex wake, every 50 us", 50, 0),
         ("spinning helper, every 2 ms (not allowed between calls)", 2000, 1))


def wake_lines(tmp: Path, wakes: int = 400) -> list[str]:
    """A markdown section: the helper's wake latency here, and what it bounds."""
    cpus = sorted(os.sched_getaffinity(0))
    cc = shutil.which("cc") or shutil.which("gcc")
    lines = ["### Two threads: how late a sleeping helper joins", ""]
    if len(cpus) < 2 or cc is None:
        return lines + ["Not measured: needs two CPUs and a C compiler.", ""]
    source, exe = tmp / "wake.c", tmp / "wake"
    source.write_text(SOURCE)
    subprocess.run([cc, "-O2", "-pthread", str(source), "-o", str(exe)], check=True)
    lines += [f"A helper pinned to CPU {cpus[1]} woken by a caller on CPU {cpus[0]}, {wakes} wakes each "
              "(microseconds from the caller's wake to the helper running):", "",
              "| case | p10 | median | p90 |", "|---|---|---|---|"]
    medians = {}
    for name, gap, spin in CASES:
        out = subprocess.run([str(exe), str(gap), str(spin), str(wakes), str(cpus[0]), str(cpus[1])],
                             capture_output=True, text=True, check=True).stdout.split()
        p10, median, p90 = (float(x) for x in out)
        medians[name] = median
        lines.append(f"| {name} | {p10:.1f} | {median:.1f} | {p90:.1f} |")
    late = medians[CASES[0][0]] * 1e-3  # ms
    lines += ["", "With the median wake, two threads can be at most 2 T1 / (T1 + L) times one thread's speed: "
              + ", ".join(f"{2 * t / (t + late):.2f}x for a {t:g} ms call" for t in (0.4, 1.0, 2.0, 4.0))
              + ". (A call's own cold start on the helper's CPU, its caches and vector units, comes on top.)", ""]
    return lines
