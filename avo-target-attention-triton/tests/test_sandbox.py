"""The candidate's worker runs in avo's sandbox: it cannot import or read the target package."""

from __future__ import annotations

from pathlib import Path

import pytest
from avo.sandbox import probe

import avo_target_attention_triton
from avo_target_attention_triton.box import WorkerFailure, WorkerProcess

PACKAGE = Path(avo_target_attention_triton.__file__).resolve().parent
PROBE = f'''
import os
try:
    import avo_target_attention_triton.reference as ref
    raise RuntimeError("LEAK: imported the target package from " + ref.__file__)
except ImportError:
    pass
if os.path.exists({str(PACKAGE / "reference.py")!r}):
    raise RuntimeError("LEAK: the target package's files are visible")
if "AVO_EVAL_SECRET" in os.environ:
    raise RuntimeError("LEAK: the run's secret is in the environment")

def attention(q, k, v, causal, scale):
    return q
'''


def _load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, level: str) -> dict[str, object]:
    monkeypatch.setenv("AVO_SANDBOX", level)
    monkeypatch.setenv("AVO_EVAL_SECRET", "s3cret")  # as if a run's evaluator had left it set
    module = tmp_path / "probe.py"
    module.write_text(PROBE)
    with WorkerProcess(tmp_path / level, module, "cpu", "candidate") as w:
        return w.info


@pytest.mark.skipif(not probe()[0], reason="needs bubblewrap")
def test_the_worker_cannot_see_the_target_package_or_the_secret(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    info = _load(tmp_path, monkeypatch, "bwrap")
    assert info["interpret"] is True and info["device"] == "cpu"


def test_without_a_sandbox_the_same_probe_finds_the_package(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # The probe is not blind: at level none (no isolation) it does see the package.
    with pytest.raises(WorkerFailure, match="LEAK"):
        _load(tmp_path, monkeypatch, "none")
