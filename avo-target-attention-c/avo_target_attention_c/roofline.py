"""The machine's one-core FMA roofline, measured: an FMA-chain probe built with the host's widest vectors.

The notes state each config's kernel GFLOP/s as a fraction of this, so "how close to the
machine" is measured on the same machine, in the same evaluation, as the kernel. The probe
is trusted code (ours), compiled with ``-O2 -march=native`` and run in the evaluator on its
pinned CPU: 12 independent chains of vector FMAs (enough to cover 4-cycle latency on two
pipes), timed with this thread's CPU clock, best of several repetitions.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

CHAINS = 12
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
"""
for _name, _text in {
    "@ACC@": _ACC,
    "@INIT@": "\n".join(f"    a{c} = m * {c + 1}.0f;" for c in range(CHAINS)),
    "@BODY@": "\n".join(f"        a{c} = a{c} * m + b;" for c in range(CHAINS)),  # one FMA per lane
    "@KEEP@": ", ".join(f"REG(a{c})" for c in range(CHAINS)),
    "@SUM@": " + ".join(f"a{c}" for c in range(CHAINS)),
}.items():
    PROBE = PROBE.replace(_name, _text)


def roof_note(roof: float | None, threads: int) -> str:
    """The notes' line about the roofline the ``roof`` column divides by."""
    if roof is None:
        return "FMA roofline: not measured (the probe did not build here)"
    return (f"FMA roofline of the pinned core{'s' if threads > 1 else ''}, measured by this evaluation: {roof:.0f} "
            f"GFLOP/s ({CHAINS} independent chains of the widest vector FMA); roof = kernel GFLOP/s / roofline")


def fma_roofline(threads: int = 1, repeats: int = 5, seconds: float = 0.05) -> float | None:
    """Single-precision FMA peak in GFLOP/s of ``threads`` cores (one core measured, times
    ``threads``), or ``None`` when no compiler builds the probe."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    with tempfile.TemporaryDirectory(prefix="avo-roofline-") as tmp:
        src, lib = Path(tmp) / "probe.c", Path(tmp) / "probe.so"
        src.write_text(PROBE)
        proc = subprocess.run([cc, "-O2", "-march=native", "-ffp-contract=fast", "-fPIC", "-shared", "-o", str(lib),
                               str(src)], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            return None
        probe = ctypes.CDLL(str(lib))
        probe.avo_fma_probe.argtypes = [ctypes.c_long]
        probe.avo_fma_probe.restype = ctypes.c_float
        lanes = probe.avo_lanes()
        iters = 1000
        while True:  # size one repetition to ~``seconds`` of CPU
            t0 = time.thread_time()
            probe.avo_fma_probe(iters)
            took = time.thread_time() - t0
            if took >= seconds / 4 or iters > 1 << 34:
                break
            iters *= 4
        iters = max(1, int(iters * seconds / max(took, 1e-6)))
        best = 0.0
        for _ in range(repeats):
            t0 = time.thread_time_ns()
            probe.avo_fma_probe(iters)
            took_ns = time.thread_time_ns() - t0
            best = max(best, 2.0 * lanes * CHAINS * iters / max(took_ns, 1))  # flops per ns = GFLOP/s
        return best * threads


if __name__ == "__main__":
    print(fma_roofline())
