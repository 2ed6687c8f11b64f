"""Every distribution in this repository depends on the core by its published name."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_plugin_depends_on_avo_core_never_on_the_unrelated_avo() -> None:
    # `avo` on the package index is another project (with its own `avo` package and a pytest
    # plugin): a plugin that depends on it pulls that in over our core.
    found = sorted(ROOT.glob("avo-target-*/pyproject.toml")) + sorted(ROOT.glob("plugins/*/pyproject.toml"))
    assert found
    for pyproject in found:
        text = pyproject.read_text()
        block = re.search(r"^dependencies\s*=\s*\[(.*?)\]", text, re.S | re.M)
        assert block, f"{pyproject} declares no dependencies"
        names = [re.split(r"[<>=!~\[; ]", d.strip().strip('"\''), maxsplit=1)[0]
                 for d in block.group(1).split(",") if d.strip()]
        assert "avo-core" in names, f"{pyproject.relative_to(ROOT)} does not depend on avo-core: {names}"
        assert "avo" not in names, f"{pyproject.relative_to(ROOT)} depends on the unrelated `avo`: {names}"
