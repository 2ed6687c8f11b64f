"""The sandbox hides avo's and every avo plugin's package folder, also plugins installed while
a process (the MCP server, a colony) is already running."""

from __future__ import annotations

from pathlib import Path

import pytest

from avo.sandbox import installed_package_dirs


def install(site: Path, name: str) -> Path:
    """A distribution ``name`` with an ``avo`` entry point, as pip lays it out in ``site``."""
    pkg = site / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("def avo_targets():\n    return []\n")
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[avo]\n{name} = {name}\n")
    return pkg.resolve()


def test_a_plugin_installed_later_is_hidden_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    first = install(site, "avo_hidden_first")
    assert first in installed_package_dirs()
    installed_package_dirs()  # remembered now
    second = install(site, "avo_hidden_second")  # installing changes the folder's mtime
    got = installed_package_dirs()
    assert first in got and second in got
