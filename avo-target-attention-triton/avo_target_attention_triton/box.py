"""A sandboxed worker process running one attention module (the candidate's, or a baseline).

Each worker gets a fresh scratch folder holding a copy of worker.py and of the module, and
starts inside avo's sandbox (:func:`avo.sandbox.popen`) with avo and every avo plugin
package hidden. On a CUDA machine the GPU's device nodes are bound in (``Sandbox.devices``);
without one, Triton's interpreter is switched on. Crashes, hangs and malformed replies
become :class:`WorkerFailure` with a message for the agent.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from types import TracebackType
from typing import Any

START_TIMEOUT_S = 180.0  # importing torch in a cold sandbox on a loaded machine
MAX_HEADER = 1 << 16


class WorkerFailure(Exception):
    """The worker crashed, hung, or the module failed; ``str(exc)`` is the agent's message."""


def _signal_text(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


def gpu_devices() -> tuple[Path, ...]:
    """The NVIDIA device nodes a CUDA process opens (control, UVM, each GPU, capabilities)."""
    found = [p for p in sorted(Path("/dev").glob("nvidia*")) if not p.is_dir()]
    caps = Path("/dev/nvidia-caps")
    if caps.is_dir():
        found += sorted(caps.iterdir())
    return tuple(found)


class WorkerProcess:
    """One running worker; a context manager so it is always killed and reaped.

    The constructor only starts the process; :attr:`info` waits until it has imported the
    module, so two workers can start side by side.
    """

    def __init__(self, scratch: Path, module: Path, device: str, role: str) -> None:
        from avo.sandbox import Sandbox, installed_package_dirs, interpreter, popen

        self.role = role
        scratch.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(__file__).with_name("worker.py"), scratch / "worker.py")
        shutil.copy(module, scratch / "attention.py")
        (scratch / "cache").mkdir(exist_ok=True)
        env = {"TRITON_CACHE_DIR": str(scratch / "cache"), "CUDA_CACHE_PATH": str(scratch / "cache"),
               "PYTHONDONTWRITEBYTECODE": "1"}
        devices: tuple[Path, ...] = ()
        readable: tuple[Path, ...] = ()
        if device == "cuda":
            devices = gpu_devices()
            readable = tuple(p for p in (Path("/sys/bus/pci"), Path("/sys/devices")) if p.exists())
            for key in ("CUDA_VISIBLE_DEVICES", "CUDA_HOME", "TRITON_PTXAS_PATH"):
                if key in os.environ:
                    env[key] = os.environ[key]
        else:
            env["TRITON_INTERPRET"] = "1"
        box = Sandbox(writable=(scratch,), readable=readable, devices=devices,
                      hide=tuple(installed_package_dirs()), env=env, cwd=scratch)
        ours, theirs = socket.socketpair()
        fd = theirs.fileno()
        self.proc = popen([interpreter(), "-I", str(scratch / "worker.py"), "--fd", str(fd), "--device", device],
                          box, pass_fds=(fd,), stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno())
        theirs.close()
        self.conn = Connection(ours.detach())
        self.module = scratch / "attention.py"
        self._info: dict[str, Any] | None = None

    @property
    def info(self) -> dict[str, Any]:
        """What the worker reported once ready: torch, Triton, the device (waits for it)."""
        if self._info is None:
            self._reply(START_TIMEOUT_S, "starting the sandbox worker")
            self._info = self.request({"op": "load", "path": str(self.module)}, START_TIMEOUT_S,
                                      "importing attention.py")[0]
        return self._info

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Ask politely, then kill the worker's whole session (the sandbox's PID namespace dies with it)."""
        if self.proc.poll() is None:
            try:
                self.conn.send_bytes(b'{"op": "exit"}')
                self.proc.wait(timeout=5)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        self._kill()
        self.conn.close()

    def _kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                self.proc.kill()
        self.proc.wait()

    def _frame(self, timeout: float, what: str, maxlength: int) -> bytes:
        try:
            ready = self.conn.poll(timeout)
        except (OSError, EOFError):
            ready = True
        if not ready:
            self._kill()
            raise WorkerFailure(f"timed out: no answer within {timeout:g} s while {what}; the {self.role} "
                                "worker was killed (an infinite loop, a deadlock, or far too slow)")
        try:
            return self.conn.recv_bytes(maxlength)
        except EOFError:
            try:
                code = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._kill()
                code = self.proc.returncode
            raise WorkerFailure(f"the {self.role} worker died ({_signal_text(code)}) while {what}") from None
        except OSError:  # a frame longer than maxlength, or a broken socket
            self._kill()
            raise WorkerFailure(f"the {self.role} worker sent an oversized or broken reply while {what}") from None

    def _reply(self, timeout: float, what: str) -> dict[str, Any]:
        raw = self._frame(timeout, what, MAX_HEADER)
        try:
            header = json.loads(raw)
        except ValueError:
            header = None
        if not isinstance(header, dict) or not isinstance(header.get("ok"), bool):
            self._kill()
            raise WorkerFailure(f"the {self.role} worker sent a malformed reply while {what} "
                                "(something wrote to the evaluator's pipe)")
        if not header["ok"]:
            raise WorkerFailure(f"{header.get('error') or 'unknown error'} (while {what})")
        return header

    def request(self, req: dict[str, Any], timeout: float, what: str,
                nbytes: int | None = None) -> tuple[dict[str, Any], bytes | None, float]:
        """Send ``req``; return (header, payload or None, wall seconds of the round trip).

        ``nbytes`` is the payload size the evaluator expects; any other size fails.
        """
        if self._info is None and req.get("op") != "load":
            self.info  # noqa: B018 - the worker must be up and have imported the module first
        t0 = time.perf_counter()
        try:
            self.conn.send_bytes(json.dumps(req).encode())
        except OSError:
            pass  # the worker is gone; the reply says how
        header = self._reply(timeout, what)
        payload = None
        if nbytes is not None:
            if header.get("nbytes") != nbytes:
                self._kill()
                raise WorkerFailure(f"the {self.role} worker announced {header.get('nbytes')!r} bytes of output "
                                    f"while {what}; expected {nbytes}")
            payload = self._frame(timeout, what, nbytes)
            if len(payload) != nbytes:
                raise WorkerFailure(f"the {self.role} worker sent {len(payload)} bytes while {what}; expected {nbytes}")
        return header, payload, time.perf_counter() - t0
