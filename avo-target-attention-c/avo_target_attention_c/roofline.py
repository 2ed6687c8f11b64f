"""The machine's one-core FMA roofline, measured: an FMA-chain probe built with the host's widest vectors.

The notes state each config's kernel GFLOP/s as a fraction of this, so "how close to the
machine" is measured on the same machine, in the same evaluation, as the kernel. The probe
is trusted code (ours), compiled with ``-O2 -march=native`` and run in the evaluator on its
pinned CPU: 12 independent chains of vector FMAs (enough to cover 4-cycle latency on two
pipes), timed with this thread's CPU clock.

The evaluation runs it twice over: best of several repetitions at the start (the peak, for
the notes), and once beside every timed pair (:meth:`Probe.rate`), so that each config's
fraction divides the kernel's median by the probe's median over the same minutes. A shared
host's speed moves by tens of percent between minutes (the probe's best-of-5 read 110-172
GFLOP/s across one session), and a fraction of a peak taken at another moment moved with it.

Where the CPU has a matrix engine the kernel may use (x86 AMX-BF16: tile registers, one
16x16x32 block of bf16 products per instruction), the same library measures its peak too
(:meth:`Probe.matrix_best`). It is not the roof column's denominator (the roofline stays the
FMA one), but it raises the plausibility bound: a kernel that splits each float into bf16
parts can do float32-accurate work faster than any FMA (measured on one core of a Xeon guest
with AMX, 2026-12-04: the engine's bf16 peak 3.5 TFLOP/s, 15x its FMA probe).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

CHAINS = 12
AMX_FLOPS_PER_ITER = 4 * 16 * 16 * 32 * 2  # avo_amx_probe: four tile products per iteration
# bf16 products per float32-accurate product, at the least: a float split into bf16 parts
# needs three part products (x0*y0 + x0*y1 + x1*y0) to come near float32; two or one leave
# attention 48-275x outside the gate's tolerance (NumPy emulation of the gate's shapes).
BF16_PER_FLOAT = 3
_ACC = ", ".join(f"a{c}" for c in range(CHAINS))
PROBE = r"""
#if defined(__AVX512F__)
#define BYTES 64
#elif defined(__AVX__)
#define BYTES 32
#else
#define BYTES 16
#endif
#if defined(__aarch64__)
#define REG "+w"
#else
#define REG "+v"
#endif
typedef float vec __attribute__((vector_size(BYTES)));
int avo_lanes(void) { return BYTES / 4; }
float avo_fma_probe(long iters)
{
    vec m, b, @ACC@;
    for (int i = 0; i < BYTES / 4; i++) { m[i] = 0.999999f; b[i] = 1e-7f; }
@INIT@
    for (long it = 0; it < iters; it++) {
@BODY@
        __asm__ volatile("" : @KEEP@);  /* independent chains, kept in registers */
    }
    vec s = @SUM@;
    float out = 0.0f;
    for (int i = 0; i < BYTES / 4; i++) out += s[i];
    return out;
}

#if defined(__x86_64__) && defined(__AMX_TILE__) && defined(__AMX_BF16__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
/* Linux hands out the tile state per process on request (ARCH_REQ_XCOMP_PERM, XTILEDATA). */
int avo_amx_ready(void) { return syscall(SYS_arch_prctl, 0x1023, 18) == 0; }
/* iters x 4 products of bf16 tiles (16 x 32 by 32 x 16) into 4 independent accumulators */
void avo_amx_probe(long iters)
{
    /* static data: GCC 12 dropped the stores into a stack struct only ldtilecfg reads */
    static const struct {
        unsigned char palette, start_row, reserved[14];
        unsigned short colsb[16];
        unsigned char rows[16];
    } __attribute__((packed, aligned(64))) cfg = {1, 0, {0}, {64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16}};
    static unsigned short a[512] __attribute__((aligned(64))), b[512] __attribute__((aligned(64)));
    _tile_loadconfig(&cfg);
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    _tile_loadd(4, a, 64);
    _tile_loadd(5, b, 64);
    for (long it = 0; it < iters; it++) {
        _tile_dpbf16ps(0, 4, 5); _tile_dpbf16ps(1, 4, 5); _tile_dpbf16ps(2, 4, 5); _tile_dpbf16ps(3, 4, 5);
    }
    _tile_release();
}
#else
int avo_amx_ready(void) { return 0; }
void avo_amx_probe(long iters) { (void)iters; }
#endif
"""
for _name, _text in {
    "@ACC@": _ACC,
    "@INIT@": "\n".join(f"    a{c} = m * {c + 1}.0f;" for c in range(CHAINS)),
    "@BODY@": "\n".join(f"        a{c} = a{c} * m + b;" for c in range(CHAINS)),  # one FMA per lane
    "@KEEP@": ", ".join(f"REG(a{c})" for c in range(CHAINS)),
    "@SUM@": " + ".join(f"a{c}" for c in range(CHAINS)),
}.items():
    PROBE = PROBE.replace(_name, _text)


def roof_note(peak: float | None, threads: int, matrix: float | None = None) -> str:
    """The notes' line about the roofline the ``roof`` column divides by (and the matrix engine, if any)."""
    if peak is None:
        return "FMA roofline: not measured (the probe did not build here)"
    note = (f"FMA roofline of the pinned core{'s' if threads > 1 else ''} ({CHAINS} independent chains of the widest "
            f"vector FMA): peak {peak:.0f} GFLOP/s at the start of this evaluation (best of 5); "
            "roof = kernel GFLOP/s / the probe's median over runs timed beside the config's calls (the probe column)")
    if matrix is not None:
        note += (f"; matrix engine (AMX-BF16 tiles): peak {matrix:.0f} GFLOP/s of bf16 products, so up to "
                 f"{matrix / BF16_PER_FLOAT:.0f} of float32-accurate work ({BF16_PER_FLOAT} bf16 products per float "
                 "product at the least); the roof column stays the FMA one")
    return note


def _sized(run: Callable[[int], object], seconds: float, cap: int) -> int:
    """Iterations for one call of ``run(iterations)`` to take about ``seconds`` of this thread's CPU."""
    iters = 1000
    while True:
        t0 = time.thread_time()
        run(iters)
        took = time.thread_time() - t0
        if took >= seconds / 4 or iters > cap:
            break
        iters *= 4
    return max(1, int(iters * seconds / max(took, 1e-6)))


class Probe:
    """The FMA probe, built and loaded; ``None`` from :meth:`build` when no compiler builds it."""

    def __init__(self, lib: Path) -> None:
        self._probe = ctypes.CDLL(str(lib))
        self._probe.avo_fma_probe.argtypes = [ctypes.c_long]
        self._probe.avo_fma_probe.restype = ctypes.c_float
        self._probe.avo_amx_probe.argtypes = [ctypes.c_long]
        self._probe.avo_amx_probe.restype = None
        self._flops_per_iter = 2.0 * self._probe.avo_lanes() * CHAINS
        self._iters = self._warm = 1000

    @classmethod
    def build(cls, folder: Path) -> Probe | None:
        """Compile the probe into ``folder`` (it must outlive the probe)."""
        cc = shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            return None
        src, lib = folder / "probe.c", folder / "probe.so"
        src.write_text(PROBE)
        proc = subprocess.run([cc, "-O2", "-march=native", "-ffp-contract=fast", "-fPIC", "-shared", "-o", str(lib),
                               str(src)], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        return cls(lib) if proc.returncode == 0 else None

    def size(self, seconds: float) -> None:
        """Make one run of :meth:`rate` last about ``seconds`` of CPU, after a fifth of that untimed."""
        self._iters = _sized(self._probe.avo_fma_probe, seconds, 1 << 34)
        self._warm = max(1, self._iters // 5)

    def rate(self) -> float:
        """One run: GFLOP/s of this thread's core (flops per nanosecond of its CPU clock).

        After other code, the first ~20-30 us of wide FMAs run slower (measured in an evaluation on
        an AVX-512 host: 148 GFLOP/s for a cold 0.2 ms run, 168 for the next one): an untimed
        warm-up run goes first, so the figure is the core's rate, not its wake-up.
        """
        self._probe.avo_fma_probe(self._warm)
        t0 = time.thread_time_ns()
        self._probe.avo_fma_probe(self._iters)
        return self._flops_per_iter * self._iters / max(time.thread_time_ns() - t0, 1)

    def best(self, repeats: int = 5, seconds: float = 0.05) -> float:
        """The peak: best of ``repeats`` runs of ``seconds`` each."""
        self.size(seconds)
        return max(self.rate() for _ in range(repeats))

    def matrix_best(self, repeats: int = 5, seconds: float = 0.02) -> float | None:
        """The matrix engine's bf16 peak in GFLOP/s of this core (best of ``repeats`` runs), or
        ``None`` when the CPU, the compiler or the kernel does not offer one to this process."""
        if not self._probe.avo_amx_ready():
            return None
        iters = _sized(self._probe.avo_amx_probe, seconds, 1 << 30)
        best = 0.0
        for _ in range(repeats):
            t0 = time.thread_time_ns()
            self._probe.avo_amx_probe(iters)
            best = max(best, AMX_FLOPS_PER_ITER * iters / max(time.thread_time_ns() - t0, 1))
        return best


def fma_roofline(threads: int = 1, repeats: int = 5, seconds: float = 0.05) -> float | None:
    """Single-precision FMA peak in GFLOP/s of ``threads`` cores (one core measured, times
    ``threads``), or ``None`` when no compiler builds the probe."""
    with tempfile.TemporaryDirectory(prefix="avo-roofline-") as tmp:
        probe = Probe.build(Path(tmp))
        return None if probe is None else probe.best(repeats, seconds) * threads


if __name__ == "__main__":
    print(fma_roofline())
    with tempfile.TemporaryDirectory(prefix="avo-roofline-") as _tmp:
        _probe = Probe.build(Path(_tmp))
        print(None if _probe is None else _probe.matrix_best())
