"""docs/TARGETS.md's worked example is real: extract it, run it through the engine and its own tests."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from avo.engine import start_run, submit
from avo.plugins import all_targets, find_target
from avo.testing import exposed_plugin

DOC = Path(__file__).resolve().parents[1] / "docs" / "TARGETS.md"
BLOCK = re.compile(r"^```(\w+) file=(\S+)\n(.*?)^```[ \t]*$", re.M | re.S)
EXPECTED = {
    "pyproject.toml", "avo_target_knapsack/__init__.py", "avo_target_knapsack/seed/packer.py",
    "avo_target_knapsack/kb/knapsack.md", "tests/conftest.py", "tests/test_conformance.py", "tests/test_gate.py",
}


def extract(doc: Path, dest: Path) -> dict[str, str]:
    """Write every ```lang file=PATH block of ``doc`` under ``dest``; return {path: text}."""
    files = {}
    for _lang, rel, body in BLOCK.findall(doc.read_text(encoding="utf-8")):
        assert rel not in files, f"{rel} appears twice in {doc.name}"
        assert not Path(rel).is_absolute() and ".." not in Path(rel).parts
        files[rel] = body
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
    return files


@pytest.fixture
def example(tmp_path: Path) -> Path:
    dist = tmp_path / "avo-target-knapsack"
    files = extract(DOC, dist)
    assert set(files) == EXPECTED
    return dist


def test_pyproject_registers_the_entry_point(example: Path) -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    meta = tomllib.loads((example / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["avo"] == {"knapsack": "avo_target_knapsack"}
    assert meta["project"]["name"] == "avo-target-knapsack"


def test_worked_example_runs_a_real_loop(example: Path, tmp_path: Path) -> None:
    with exposed_plugin(example, distribution="avo-target-knapsack",
                        entry_points={"knapsack": "avo_target_knapsack"}, where=tmp_path / "site"):
        spec = find_target("knapsack")
        assert spec.provider == "knapsack" and spec.has_baselines
        run = start_run("knapsack", tmp_path / "runs", quick=True)
        v0 = run.state.versions[0]
        assert set(v0.metrics) == {"n20", "n60", "n150"} and 0 < v0.scalar < 1
        assert {b.name for b in run.state.baselines} == {"lightest_first", "best_ratio_first"}
        assert all(b.correct for b in run.state.baselines)
        assert (run.paths.kb / "knapsack.md").is_file()

        packer = run.paths.work / "packer.py"
        packer.write_text(packer.read_text().replace("key=lambda i: -values[i]",
                                                     "key=lambda i: -values[i] / weights[i]"))
        out = submit(run, "greedy by value density")
        assert out.outcome == "accepted" and out.version is not None and out.version.new_best
        ratio_baseline = next(b.scalar for b in run.state.baselines if b.name == "best_ratio_first")
        # The same algorithm as the baseline, on instances drawn for this candidate: close, not equal.
        assert out.evaluation.scalar == pytest.approx(ratio_baseline, rel=0.02)
        assert out.evaluation.scalar != pytest.approx(ratio_baseline, rel=1e-9)

        packer.write_text(packer.read_text().replace("return chosen", "return chosen + chosen"))
        out = submit(run, "pack everything twice")
        assert out.outcome == "failed" and "the same item twice" in (out.evaluation.result.error or "")
    assert "knapsack" not in {s.name for s in all_targets()}  # the exposure was undone


def test_worked_example_tests_pass_without_installing(example: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider"],
                          cwd=example, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    summary = proc.stdout.strip().splitlines()[-1]
    assert re.search(r"\b16 passed\b", summary), summary


PLUGINS_DOC = DOC.parent / "PLUGINS.md"


def test_plugins_md_backend_runs_evolve_and_its_conformance_suite(tmp_path: Path) -> None:
    """The minimal backend of docs/PLUGINS.md drives a real `avo evolve` loop on the toy target."""
    from avo import plugins
    from avo.evolve import EvolveConfig, evolve

    files = extract(PLUGINS_DOC, tmp_path / "echo")
    assert set(files) == {"avo_backend_echo.py", "tests/test_backend_echo.py"}
    namespace: dict[str, object] = {}
    exec(compile(files["avo_backend_echo.py"], "avo_backend_echo.py", "exec"), namespace)
    module = type(sys)("avo_backend_echo")
    module.__dict__.update(namespace)
    plugins.register(module, name="echo")
    try:
        suite_ns: dict[str, object] = {}
        exec(compile(files["tests/test_backend_echo.py"], "test_backend_echo.py", "exec"), suite_ns)
        suite = suite_ns["TestEcho"]()  # type: ignore[operator]
        for scratch in "abc":
            (tmp_path / scratch).mkdir()
        info = plugins.find_backend("echo")
        suite.test_announced_with_complete_info(info)
        suite.test_names_do_not_collide(info)
        suite.test_hooks_are_all_known(info)
        suite.test_step_returns_a_step_result(info, tmp_path / "b")
        assert (tmp_path / "b" / "work" / "NOTES.txt").read_text() == "hello\n"
        suite.test_supervise_returns_a_redirect(info, tmp_path / "c")

        run = start_run(str(Path(__file__).parent / "fixtures" / "toy"), tmp_path / "runs")
        command = "sed -i 's/^X = .*/X = 7.0/' solution.py && echo set X to 7"
        summary = evolve(run, EvolveConfig(backend="echo", max_steps=2, options={"command": command}))
        run.state = run.state.model_validate_json(run.paths.run_json.read_text())
        assert [v.message for v in run.state.versions] == ["seed x_0", "set X to 7"]
        assert summary.steps_taken == 2  # the second step changed nothing and still counted
    finally:
        plugins.unregister("echo")


def test_paper_map_names_code_that_exists() -> None:
    """Every `avo/x.py` `name` pair in docs/PAPER_MAP.md names a real function, class, field or parameter."""
    root = DOC.parents[1]
    text = (DOC.parent / "PAPER_MAP.md").read_text(encoding="utf-8")
    paths = set(re.findall(r"`((?:avo|plugins|avo-target-[\w-]+)/[\w./-]*)`", text))
    assert len(paths) > 15
    for rel in paths:
        assert (root / rel.rstrip("/")).exists(), f"PAPER_MAP.md names {rel}, which does not exist"
    pairs = re.findall(r"`(avo/[\w/]+\.py)` ((?:`[A-Za-z_][\w.]*`(?:, | / | with | and )?)+)", text)
    checked = 0
    for rel, names in pairs:
        source = (root / rel).read_text(encoding="utf-8")
        for name in re.findall(r"`([A-Za-z_][\w.]*)`", names):
            leaf = name.split(".")[-1]
            assert re.search(rf"\b(def|class) {leaf}\b|\b{leaf}\s*[:=]", source), (
                f"PAPER_MAP.md says {rel} has {name}; it does not")
            checked += 1
    assert checked > 30
