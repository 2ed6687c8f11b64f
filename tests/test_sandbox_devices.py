"""Sandbox.devices: a device node (a GPU's /dev/nvidia*) is usable inside, a plain bind is not."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from avo.sandbox import Sandbox, interpreter, popen, probe

NODE = Path("/dev/net/tun")  # world read-write on most Linux hosts, absent from bwrap's fresh /dev
OPEN = f"import os\ntry:\n    os.close(os.open({str(NODE)!r}, os.O_RDWR))\n    print('opened')\nexcept OSError as e:\n    print('refused', e.errno)\n"


def _run(box: Sandbox) -> str:
    proc = popen([interpreter(), "-I", "-c", OPEN], box, level="bwrap", stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return out.strip()


@pytest.mark.skipif(not probe()[0] or not NODE.exists(), reason="needs bubblewrap and /dev/net/tun")
def test_devices_are_bound_usable_and_readable_is_not_enough(tmp_path: Path) -> None:
    assert _run(Sandbox(cwd=tmp_path, writable=(tmp_path,))) == "refused 2"  # not there at all
    assert _run(Sandbox(cwd=tmp_path, writable=(tmp_path,), readable=(NODE,))) == "refused 13"  # nodev
    assert _run(Sandbox(cwd=tmp_path, writable=(tmp_path,), devices=(NODE,))) == "opened"
