"""Red team, session 14: what read-only views and MCP tools show or write for a hostile agent.

The agent is a same-user process that edits any file of its run (SECURITY.md). Each test
makes a real run (or a colony of real runs) on the toy target, does what an agent could do,
and checks the view or tool through the real entry point: the ``avo`` command in a child
process, or the real ``mcp`` client against ``python -m avo.mcp_server``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from anyio.from_thread import start_blocking_portal
from mcp import StdioServerParameters

from avo.colony import MigrationPolicy, island_specs
from avo.engine import Run, open_run, start_run, submit
from avo.errors import AvoError
from avo.islands import start_colony
from tests.conftest import set_constants
from tests.test_mcp import Client, _connect

FORGED = 1e9


@contextmanager
def _mcp(runs: Path, toy: Path, **env: str) -> Iterator[Client]:
    """The real MCP client against a server process serving ``runs``."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "avo.mcp_server"], cwd=str(runs.parent),
                                   env={"AVO_RUNS_DIR": str(runs), "AVO_DISABLE_PLUGIN_AUTOLOAD": "1", **env})
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(_connect(params)) as session:
        yield Client(portal, session, runs, toy)


def _avo(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AVO_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run([sys.executable, "-m", "avo", *args], env=env, text=True, capture_output=True, timeout=300)


def _colony(toy: Path, runs_root: Path) -> Path:
    return start_colony(str(toy), runs_root, island_specs(2, {}), MigrationPolicy(topology="none"), max_steps=20,
                        sandbox="none")


def _island(colony: Path, k: int) -> Run:
    return open_run(colony / f"island-{k}", colony)


# -- 1. colony views check every island's record -------------------------------------------


def test_a_forged_island_score_is_refused_by_every_colony_view(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    """island-1's agent sets its run.json's v1 to 1e9. `avo status --run island-1` refuses it;
    the colony's status, log, JSON, report, plot data and MCP status showed "colony best:
    island-1 v1 = 1.000e+09"."""
    from avo.colony_report import colony_series

    colony = _colony(toy, runs_root)
    one = _island(colony, 1)
    set_constants(one.paths.work, x=6)
    assert submit(one, "X to 6").outcome == "accepted"
    data = json.loads(one.paths.run_json.read_text())
    data["versions"][1]["scalar"] = FORGED
    one.paths.run_json.write_text(json.dumps(data))
    with pytest.raises(AvoError, match="disagrees with its lineage"):
        open_run(one.paths.root, colony)  # the single-run view's check

    text = _avo("status", "--run", str(colony))
    assert text.returncode == 0, text.stderr
    assert "1.000e+09" not in text.stdout and "★" not in text.stdout.splitlines()[2], text.stdout
    assert re.search(r"^island-1 +record refused: the record of run island-1 disagrees with its lineage",
                     text.stdout, re.MULTILINE), text.stdout
    assert "colony best: island-2 v0 = " in text.stdout and "not compared (record refused): island-1" in text.stdout

    summary = json.loads(_avo("status", "--run", str(colony), "--json").stdout)
    assert summary["best_island"] == "island-2" and summary["refused"] == ["island-1"]
    assert "best" not in summary["islands"][0] and "disagrees" in summary["islands"][0]["refused"]

    log = _avo("log", "--run", str(colony)).stdout
    assert "island-1   record refused:" in log and "1.000e+09" not in log

    report = colony.parent / "colony.html"
    done = _avo("report", "--run", str(colony), "-o", str(report), "--no-plot")
    assert done.returncode == 0, done.stderr
    html = report.read_text()
    assert "Colony best: <b>island-2 v0 = " in html and "v1 = 1.000e+09" not in html
    assert "record refused" in html and "island-1: lineage" not in html

    series = colony_series(colony)
    assert "refused" in series["island-1"] and FORGED not in series["island-2"]["running_best"]

    with _mcp(runs_root, toy) as client:
        status = client.ok("avo_status", run=colony.name)
    assert "1.000e+09" not in status and "colony best: island-2" in status and "record refused" in status


def test_an_island_folder_swapped_for_a_link_to_a_better_run_is_refused(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    """island-2's agent replaces its island by a link to an honest run outside the colony with a
    better score: that run's record checks, but it is not this colony's island."""
    colony = _colony(toy, runs_root)
    elsewhere = start_run(str(toy), runs_root.parent / "elsewhere", sandbox="none")
    set_constants(elsewhere.paths.work, x=6)
    assert submit(elsewhere, "X to 6").outcome == "accepted"
    os.rename(colony / "island-2", colony / "island-2.real")
    os.symlink(elsewhere.paths.root, colony / "island-2")

    text = _avo("status", "--run", str(colony)).stdout
    assert re.search(r"^island-2 +record refused: .*island-2 is a symlink", text, re.MULTILINE), text
    assert "colony best: island-1 v0 = " in text
    summary = json.loads(_avo("status", "--run", str(colony), "--json").stdout)
    assert summary["best_island"] == "island-1" and "symlink" in summary["islands"][1]["refused"]


# -- 2. avo_plot writes a plain file name into the run's own folders ------------------------


def test_mcp_plot_writes_only_a_plain_name_into_the_run(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    """output=".avo/evil.png" wrote into avo's private folder (and made folders there),
    ".avo/lineage.git/refs/heads/x.png" planted a broken ref in the backup, and
    "../OTHER/trajectory.png" wrote into another run."""
    run = start_run(str(toy), runs_root, sandbox="none")
    other = start_run(str(toy), runs_root, sandbox="none")
    private = sorted(p.relative_to(run.paths.root) for p in (run.paths.root / ".avo").rglob("*"))
    before = other.paths.root / "trajectory.png"
    with _mcp(runs_root, toy) as client:
        for output in (".avo/evil.png", ".avo/lineage.git/refs/heads/x.png", ".avo/pending.json/x.png",
                       f"../{other.paths.root.name}/trajectory.png", str(other.paths.root / "trajectory.png"),
                       "work/x.png", "plots/../x.png", "..png", "notes.txt"):
            said = client.error("avo_plot", run=run.state.id, output=output)
            assert "avo_plot writes only a plain file name ending in .png, .svg or .pdf" in said, said
        assert sorted(p.relative_to(run.paths.root) for p in (run.paths.root / ".avo").rglob("*")) == private
        assert not before.exists() and not (run.paths.root / "x.png").exists()
        assert _avo("status", "--run", str(run.paths.root)).returncode == 0
        done = client.ok("avo_plot", run=run.state.id, output="plots/fig.svg")
        assert done == f"plot written to {run.paths.root / 'plots' / 'fig.svg'}"
        assert client.ok("avo_plot", run=run.state.id) == f"plot written to {run.paths.root / 'trajectory.png'}"
    assert (run.paths.root / "trajectory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (run.paths.root / "plots" / "fig.svg").read_bytes()


def test_mcp_plot_never_writes_through_plots_swapped_for_a_link_while_drawing(
        toy: Path, runs_root: Path, core_plugins: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's process swaps <run>/plots for a link to a folder outside the runs directory
    while the figure is drawn (after the output path was checked): the PNG landed outside."""
    import avo.plot
    from avo.mcp_server import AvoTools

    run = start_run(str(toy), runs_root, sandbox="none")
    plots = run.paths.root / "plots"
    plots.mkdir()
    outside = runs_root.parent / "outside"
    outside.mkdir()
    draw = avo.plot.build_figure

    def swapped_while_drawing(*args: object, **kwargs: object) -> object:
        os.rename(plots, plots.with_name("plots.real"))
        os.symlink(outside, plots)
        return draw(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(avo.plot, "build_figure", swapped_while_drawing)
    said = AvoTools(runs_root).plot(run=run.state.id, output="plots/fig.png")
    assert not (outside / "fig.png").exists() and list(outside.iterdir()) == []
    assert not plots.is_symlink() and (plots / "fig.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert said == f"plot written to {plots / 'fig.png'}"
    assert [p.name for p in run.paths.root.glob("plots-found-*") if p.is_symlink()]  # the link, set aside


# -- 3. avo_start_run refuses a judge the agent wrote --------------------------------------


def _judge(folder: Path, name: str) -> Path:
    """A target folder whose evaluator passes everything with a huge score."""
    (folder / "seed").mkdir(parents=True)
    (folder / "kb").mkdir()
    (folder / "seed" / "solution.py").write_text("# nothing\n")
    (folder / "eval.py").write_text('import json; print(json.dumps({"correct": True, "metrics": {"score": 1e9}}))\n')
    (folder / "target.yaml").write_text(f'name: {name}\ndescription: "a judge"\nentrypoint: solution.py\n'
                                        'seed: seed\nknowledge_base: kb\n'
                                        'evaluate:\n  command: ["{python}", "{target}/eval.py"]\n')
    return folder


def _runs(runs_root: Path) -> list[str]:
    return sorted(p.name for p in runs_root.iterdir() if (p / "run.json").is_file())


def test_mcp_start_run_refuses_a_target_folder_inside_the_runs_directory(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    """The agent writes a target folder in its own work/ (an evaluator that says 1e9) and starts
    a run on it over MCP: the new run showed a score its own judge gave."""
    run = start_run(str(toy), runs_root, sandbox="none")
    judge = _judge(run.paths.work / "judge", "judge")
    with _mcp(runs_root, toy) as client:
        for ref in (str(judge), f"runs/{run.state.id}/work/judge", str(judge / "target.yaml")):
            said = client.error("avo_start_run", target=ref)
            assert "is a folder inside the runs directory" in said, said
        linked = runs_root.parent / "linked-judge"
        os.symlink(judge, linked)  # a link outside to the folder inside
        assert "inside the runs directory" in client.error("avo_start_run", target=str(linked))
    assert _runs(runs_root) == [run.state.id]


def test_mcp_start_run_refuses_a_target_folder_that_takes_an_installed_targets_name(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    """A target folder outside the runs directory whose target.yaml says ``name: toy`` while
    toy is installed (here from $AVO_TARGET_PATH): the run would pass for a toy run."""
    installed = runs_root.parent / "installed"
    installed.mkdir()
    shutil.copytree(toy, installed / "toy")
    judge = _judge(runs_root.parent / "judge", "toy")
    runs_root.mkdir()
    with _mcp(runs_root, toy, AVO_TARGET_PATH=str(installed)) as client:
        said = client.error("avo_start_run", target=str(judge))
        assert "names itself 'toy', the name of an installed target" in said, said
        assert _runs(runs_root) == []
        started = client.ok("avo_start_run", target="toy")  # the installed one, by name
    assert f"target toy is a directory target (not an installed plugin): its evaluator was copied from " \
           f"{(installed / 'toy').resolve()}" in started
