"""Compile the candidate ``kernel.c`` into a shared library in a private build directory.

cffi is used in ABI mode (``ffi.dlopen`` in the sandbox worker), not API mode: the build
is then one gcc command whose diagnostics we capture verbatim and trim for the agent (no
setuptools/distutils layer rewriting them), it needs no Python headers, and it takes a
fraction of a second. The one thing API mode would add, a compiler check of the
prototype, we get by force-including the prototype into kernel.c (``-include``), so a
definition with another signature is a compile error. The extra libffi call overhead
(about a microsecond) is noise against calls of 0.1 ms and more.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from avo.sandbox import Sandbox, installed_package_dirs, popen

KERNEL_FILE = "kernel.c"
CFLAGS_FILE = "cflags.txt"
SYMBOL = "attention"
PROTOTYPE = (
    "void attention(const float *q, const float *k, const float *v, float *out, "
    "int heads, int n, int d, int causal);"
)
BASE_FLAGS = ["-O3", "-std=gnu11", "-fPIC", "-Wall"]

# The worker's request loop for timed calls, ours: a request is four little-endian int32
# (heads, n, d, causal; heads 0 ends the loop), the reply one byte. Through Python (JSON, cffi)
# a call cost 60-160 us besides the kernel, all of it subtracted as an empty call timed beside
# it; a kernel that answered the requests itself, from C, skipped most of that and was paid for
# it (red team, round six: 1.79x). Here both workers take the same few microseconds, and there
# is nothing left for a kernel's own loop to save.
SERVE_SYMBOL = "avo_serve"
SERVE_PROTOTYPE = "int avo_serve(int fd, void *fn, const float *q, const float *k, const float *v, float *out);"
SERVE_SOURCE = r"""#include <errno.h>
#include <stdint.h>
#include <unistd.h>
typedef void (*kernel_fn)(const float *, const float *, const float *, float *, int, int, int, int);
static int put(int fd, char c)
{
    while (write(fd, &c, 1) != 1)
        if (errno != EINTR) return -1;
    return 0;
}
int avo_serve(int fd, void *fn, const float *q, const float *k, const float *v, float *out)
{
    int32_t req[4];
    if (put(fd, 'S') < 0) return -1; /* serving */
    for (;;) {
        size_t got = 0;
        while (got < sizeof req) {
            ssize_t r = read(fd, (char *)req + got, sizeof req - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) return -1;
            got += (size_t)r;
        }
        if (req[0] == 0) return 0; /* back to the JSON requests, whose loop answers this one */
        ((kernel_fn)fn)(q, k, v, out, req[0], req[1], req[2], req[3]);
        if (put(fd, 'k') < 0) return -1;
    }
}
"""
COMPILE_TIMEOUT_S = 120.0
MAX_ERRORS_SHOWN = 3
MAX_MESSAGE_CHARS = 1800

# Flags that would change what is built or where it goes, or run foreign code in gcc.
_FORBIDDEN_EXACT = {"-o", "-c", "-E", "-S", "-M", "-MM", "-v", "-###", "-shared", "-static", "-x", "-include"}
_FORBIDDEN_PREFIX = ("@", "-fplugin", "-wrapper", "-B", "-specs", "-save-temps", "-dump", "-fdump", "-MF", "-o")
# Link-relevant flags passed on to the shared-object link as well.
_LINK_PREFIX = ("-fopenmp", "-pthread", "-l", "-fsanitize", "-ffast-math", "-Ofast", "-static-libgcc", "-flto")


class BuildError(Exception):
    """The candidate did not build; ``message`` is what the agent sees, ``full`` the log."""

    def __init__(self, message: str, full: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.full = full


@dataclass
class Build:
    """A built candidate: the shared library and how it was made."""

    library: Path
    flags: list[str]
    command: list[str]
    output: str  # compiler warnings, if any


def read_cflags(workdir: Path) -> list[str]:
    """The candidate's extra flags from ``cflags.txt`` (shell-quoted words), validated."""
    path = workdir / CFLAGS_FILE
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = [line.split("#", 1)[0] for line in text.splitlines()]
    try:
        words = shlex.split(" ".join(lines))
    except ValueError as exc:
        raise BuildError(f"{CFLAGS_FILE}: cannot split into flags ({exc})") from None
    for word in words:
        if not word.startswith("-"):
            raise BuildError(f"{CFLAGS_FILE}: {word!r} is not a compiler flag; only flags are allowed, no files")
        if word in _FORBIDDEN_EXACT or word.startswith(_FORBIDDEN_PREFIX):
            raise BuildError(
                f"{CFLAGS_FILE}: flag {word!r} is not allowed (it changes what is built or where); "
                "use optimisation, target and language flags such as -O3 -march=native -fopenmp"
            )
    return words


_DIAG = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<kind>fatal error|error|warning|note): ")


def trim_diagnostics(text: str, build_dir: Path) -> str:
    """The first errors (file:line: message plus gcc's source excerpt), paths made relative."""
    text = text.replace(str(build_dir) + "/", "")
    lines = text.splitlines()
    picked: list[str] = []
    errors = 0
    i = 0
    while i < len(lines) and errors < MAX_ERRORS_SHOWN:
        m = _DIAG.match(lines[i])
        is_error = bool(m and m.group("kind") in ("error", "fatal error"))
        # an error, and the notes right after it (e.g. where the prototype was declared)
        if is_error or (m and m.group("kind") == "note" and picked and errors):
            errors += is_error
            picked.append(lines[i])
            # gcc follows a diagnostic with the source line and a caret line ("  12 | ...").
            j = i + 1
            while j < len(lines) and j <= i + 3 and not _DIAG.match(lines[j]) and "|" in lines[j]:
                picked.append(lines[j])
                j += 1
            i = j
            continue
        if "undefined reference" in lines[i] or lines[i].startswith(("/usr/bin/ld", "collect2")):
            errors += 1
            picked.append(lines[i].strip())
        i += 1
    if not picked:  # no recognisable diagnostic: show the head of whatever gcc said
        picked = [line for line in lines if line.strip()][:8]
    total = sum(1 for line in lines if (m := _DIAG.match(line)) and m.group("kind") in ("error", "fatal error"))
    more = f"\n... ({total - errors} more errors; full compiler output in the evaluation log)" if total > errors else ""
    message = "\n".join(picked)
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + " ..."
    return message + more


def compile_kernel(workdir: Path, build_dir: Path, compiler: str | None = None) -> Build:
    """Compile ``workdir/kernel.c`` (+ ``cflags.txt``) into ``build_dir/libkernel.so``."""
    source = workdir / KERNEL_FILE
    if not source.is_file():
        raise BuildError(f"no {KERNEL_FILE} in the candidate; the target evolves {KERNEL_FILE}")
    cc = compiler or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise BuildError("no C compiler found on PATH (cc or gcc); attention_c needs one")
    flags = read_cflags(workdir)
    build_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, build_dir / KERNEL_FILE)
    header = build_dir / "avo_attention.h"
    header.write_text(f"/* force-included by avo: the contract */\n{PROTOTYPE}\n")
    library = build_dir / "libkernel.so"
    link = [f for f in flags if f.startswith(_LINK_PREFIX)]
    command = [cc, *BASE_FLAGS, *flags, "-include", header.name, "-shared", "-Wl,-z,defs",
               "-o", library.name, KERNEL_FILE, *link, "-lm"]
    # The compiler runs inside the sandbox too: an #include or .incbin of the target's files,
    # the run's state or another candidate finds nothing, and nothing it writes outlives the
    # evaluation's scratch folder. LC_ALL=C: plain ASCII quotes in diagnostics.
    box = Sandbox(writable=(build_dir,), hide=tuple(installed_package_dirs()), env={"LC_ALL": "C"}, cwd=build_dir)
    proc = popen(command, box, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: cc1 and as go too
        proc.communicate()
        raise BuildError(f"the compiler ran past {COMPILE_TIMEOUT_S:g} s and was stopped") from None
    output = (stdout + stderr).strip()
    if proc.returncode != 0 or not library.exists():
        trimmed = trim_diagnostics(output, build_dir)
        raise BuildError(f"{KERNEL_FILE} does not compile:\n{trimmed}", full=f"$ {shlex.join(command)}\n{output}")
    return Build(library, flags, command, output)


def compile_serve(build_dir: Path) -> Path:
    """Build the request loop (:data:`SERVE_SOURCE`, trusted) into ``build_dir/libserve.so``."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise BuildError("no C compiler found on PATH (cc or gcc); attention_c needs one")
    build_dir.mkdir(parents=True, exist_ok=True)
    source, library = build_dir / "serve.c", build_dir / "libserve.so"
    source.write_text(SERVE_SOURCE)
    proc = subprocess.run([cc, "-O2", "-std=gnu11", "-fPIC", "-shared", "-o", str(library), str(source)],
                          capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise BuildError(f"the worker's request loop does not compile here:\n{proc.stderr.strip()}")
    return library
