"""Shared fixtures: a toy target copy per test, a private runs directory, clean plugins."""

from __future__ import annotations

import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from avo.plugins import reset_plugin_manager

# A suite started in the background by a non-interactive shell (`./.ci/run &`) inherits SIGINT
# ignored, and so does every avo process it starts: the ctrl-c tests then saw avo ignore it,
# rightly. They test the default, so the suite restores it for itself and its children.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

FIXTURES = Path(__file__).parent / "fixtures"


def install_plugin(site: Path, monkeypatch: pytest.MonkeyPatch, module: str, source: str, *, name: str,
                   version: str, entry: str) -> None:
    """Install plugin ``module`` the way pip would: the module plus a dist-info naming its
    entry point, in ``site``, on this process's path and the evaluator children's."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(source)
    dist = site / f"{module}-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (dist / "entry_points.txt").write_text(f"[avo]\n{entry} = {module}\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.delenv("AVO_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    reset_plugin_manager()


@pytest.fixture
def runs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "runs"
    monkeypatch.setenv("AVO_RUNS_DIR", str(root))
    return root


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    """A private copy of the toy target, so a test may modify its evaluator."""
    dest = tmp_path / "toy"
    shutil.copytree(FIXTURES / "toy", dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.fixture
def core_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Only the core's built-in plugins, in this process and in evaluator children."""
    monkeypatch.setenv("AVO_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_plugin_manager()
    yield
    reset_plugin_manager()


def set_constants(work: Path, x: float | None = None, y: float | None = None) -> None:
    """Edit the toy candidate the way an agent would."""
    path = work / "solution.py"
    lines = []
    for line in path.read_text().splitlines():
        if x is not None and line.startswith("X = "):
            line = f"X = {x}"
        if y is not None and line.startswith("Y = "):
            line = f"Y = {y}"
        lines.append(line)
    path.write_text("\n".join(lines) + "\n")
