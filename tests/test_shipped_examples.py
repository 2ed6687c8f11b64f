"""The runs shipped in examples/ reproduce their recorded best scores from their bundles.

Deterministic targets (noise band 0) are re-checked here, exactly. Timing targets (a noise
band, e.g. attention_c's 8 %) are re-checked with `avo verify examples/<run>` by hand: their
verdict depends on how busy the machine is, which a CI gate must not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from avo.examples import verify_example

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def shipped(deterministic: bool) -> list[str]:
    names = []
    for folder in sorted(EXAMPLES.glob("*/run.json")):
        band = json.loads(folder.read_text())["options"]["noise"]["band"]
        if (band == 0) == deterministic:
            names.append(folder.parent.name)
    return names


@pytest.mark.parametrize("name", shipped(deterministic=True))
def test_deterministic_example_reproduces_exactly(name: str) -> None:
    result = verify_example(EXAMPLES / name)
    assert result.ok, result.detail
    assert result.detail == "reproduced exactly"


@pytest.mark.parametrize("name", shipped(deterministic=False))
def test_noisy_example_bundle_and_record_agree(name: str) -> None:
    """Without timing: every recorded version is in the bundle with its recorded commit."""
    import subprocess
    import tempfile

    data = json.loads((EXAMPLES / name / "run.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["git", "clone", "-q", str(EXAMPLES / name / "lineage.bundle"), tmp], check=True)
        for version in data["versions"]:
            sha = subprocess.run(["git", "rev-parse", f"v{version['n']}^{{commit}}"], cwd=tmp,
                                 capture_output=True, text=True, check=True).stdout.strip()
            assert sha == version["sha"]
    assert (EXAMPLES / name / "README.md").exists() and (EXAMPLES / name / "trajectory.jsonl").exists()
