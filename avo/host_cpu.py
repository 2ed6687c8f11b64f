"""Which kind of CPU this machine is: the key a timed score is comparable under.

A speedup measured against a reference implementation (attention_c's kernel against
NumPy/BLAS) is a property of the CPU as much as of the code: the same kernel read 4.03 on one
Xeon model and 4.47 on another. Each evaluation records the class of the CPU it ran on, so
``avo verify`` can tell a record it cannot reproduce on this kind of machine from a false one.
The class is the vendor, family and model (what sets the microarchitecture) and the widest
vector ISA the guest exposes (what ``-march=native`` builds for); not the clock, the core
count or the host name.
"""

from __future__ import annotations

import platform
import subprocess
from functools import cache
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# Widest first: the first flag the CPU has names its vector tier.
_TIERS = (("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx"), ("sse4_2", "sse4.2"),
          ("sve2", "sve2"), ("sve", "sve"), ("asimd", "neon"))


def classify(cpuinfo: str, machine: str) -> tuple[str, str]:
    """The class key and the readable name of a CPU from the text of ``/proc/cpuinfo``.

    Only the first processor's block is read (every core of a guest is the same model).
    """
    fields: dict[str, str] = {}
    for line in cpuinfo.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    flags = set((fields.get("flags") or fields.get("features") or "").split())
    tier = next((name for flag, name in _TIERS if flag in flags), "")
    if "vendor_id" in fields:  # x86
        core = f"{fields['vendor_id']} family {fields.get('cpu family', '?')} model {fields.get('model', '?')}"
    elif "cpu implementer" in fields:  # Arm: the implementer and part numbers name the core
        core = f"implementer {fields['cpu implementer']} part {fields.get('cpu part', '?')}"
    else:
        core = fields.get("model name") or fields.get("cpu") or "unknown"
    key = " ".join(filter(None, (machine, core, tier)))
    return key, fields.get("model name") or core


@cache
def cpu_class() -> str:
    """This machine's CPU class, e.g. ``x86_64 GenuineIntel family 6 model 106 avx512``."""
    return _this_cpu()[0]


@cache
def cpu_name() -> str:
    """This machine's CPU as its vendor names it, e.g. ``Intel(R) Xeon(R) Processor @ 2.60GHz``."""
    return _this_cpu()[1]


def _this_cpu() -> tuple[str, str]:
    machine = platform.machine() or "unknown"
    try:
        return classify(CPUINFO.read_text(errors="replace"), machine)
    except OSError:
        pass
    brand = ""
    if platform.system() == "Darwin":  # no /proc: the brand string names the chip (Apple M2 Pro)
        try:
            brand = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                   text=True, timeout=5).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            brand = ""
    brand = brand or platform.processor() or "unknown"
    return f"{machine} {brand}", brand
