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


@pytest.mark.parametrize("name", shipped(deterministic=False))
def test_noisy_example_cpu_references_are_what_record_host_writes(name: str) -> None:
    """Without timing: an example's hosts.json reads, names the record's CPU class for a run
    that predates recording it, and holds only references `avo verify --record-host` accepts
    (a version the run has, its middle draw, draws within the band, another class than the record's)."""
    from avo.examples import load_example, recorded_cpu_class
    from avo.host_references import load_references

    folder = EXAMPLES / name
    refs = load_references(folder)
    state, best = load_example(folder)
    recorded = recorded_cpu_class(folder, best) or refs.recorded_on
    if not (folder / "hosts.json").exists():
        assert not refs.references
        return
    assert recorded, f"{name}: hosts.json must say which CPU class the record was measured on"
    band = state.options.noise.band
    for ref in refs.references:
        assert ref.cpu != recorded and any(v.n == ref.version for v in state.versions)
        assert ref.scalar == sorted(ref.draws)[(len(ref.draws) - 1) // 2]
        assert max(ref.draws) / min(ref.draws) - 1 <= band
