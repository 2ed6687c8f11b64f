"""Islands: a colony of ordinary runs, migration through the commit policy, the concurrent
driver, colony views, SIGKILL and resume, and session-mode agents on two islands at once.

Real git, real evaluator child processes, real ``avo`` processes; the agents are scripts
behind the mock backend (and the classic backend on game2048)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from avo.colony import MigrationPolicy, colony_of, island_specs, load_colony, read_events
from avo.engine import Run, open_run, submit
from avo.errors import AvoError
from avo.evolve import steps_taken
from avo.islands import start_colony
from avo.lineage import commit_message
from avo.migration import offer
from avo.prompts import variation_prompt
from avo.record_format import parse_trailers
from avo.state import read_trajectory
from tests.conftest import set_constants

# island-1's agent walks X up by one each step (better each time, up to 7); the others make
# every step worse (X down by a half), so they can only improve through migrants.
AGENT = textwrap.dedent('''
    import json, os, pathlib, re, time
    work = pathlib.Path(os.environ["AVO_WORK_DIR"])
    island = work.parent.name
    sol = work / "solution.py"
    text = sol.read_text()
    x = float(re.search(r"^X = (.*)$", text, re.M).group(1))
    x = x + 1.0 if island == "island-1" else x - 0.5
    sol.write_text(re.sub(r"^X = .*$", f"X = {x}", text, flags=re.M))
    counter = pathlib.Path(os.environ["AGENT_DIR"]) / island
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    prompt = pathlib.Path(os.environ["AVO_PROMPT_FILE"]).read_text()
    if "## Migrants from other islands" in prompt:
        (pathlib.Path(os.environ["AGENT_DIR"]) / f"{island}.saw-migrant").write_text(prompt)
    if island != "island-1":
        time.sleep(float(os.environ.get("AGENT_LAG", "0")))  # island-1 stays ahead
    if os.environ.get("AGENT_HANG") and n == 2:
        (pathlib.Path(os.environ["AGENT_DIR"]) / f"{island}.hanging").write_text(str(os.getpid()))
        time.sleep(120)
    print(json.dumps({"message": f"X to {x}", "cost_usd": 0.001}))
''')
SUPERVISOR = "print('Try other values of X; try Y too.')\n"


@pytest.fixture
def scripts(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "sup.py").write_text(SUPERVISOR)
    (tmp_path / "agents").mkdir()
    return {"command": f"{sys.executable} {tmp_path / 'agent.py'}",
            "supervisor": f"{sys.executable} {tmp_path / 'sup.py'}", "dir": str(tmp_path / "agents")}


def _env(scripts: dict[str, str], runs_root: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "AVO_DISABLE_PLUGIN_AUTOLOAD": "1", "AVO_RUNS_DIR": str(runs_root), "AVO_SANDBOX": "none",
           "AVO_MOCK_COMMAND": scripts["command"], "AVO_MOCK_SUPERVISOR_COMMAND": scripts["supervisor"],
           "AGENT_DIR": scripts["dir"], **extra}
    return env


def _avo(args: list[str], env: dict[str, str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "avo", *args], env=env, text=True, capture_output=True,
                          timeout=kw.pop("timeout", 300), **kw)


def _colony(runs_root: Path) -> Path:
    found = [p for p in runs_root.iterdir() if (p / "colony.json").is_file()]
    assert len(found) == 1, found
    return found[0]


def _start(toy: Path, runs_root: Path, n: int = 2, every: int = 1, topology: str = "ring") -> Path:
    return start_colony(str(toy), runs_root, island_specs(n, {}), MigrationPolicy(topology=topology, every=every),
                        max_steps=20, sandbox="none")


def _island(colony: Path, k: int) -> Run:
    return open_run(colony / f"island-{k}", colony)


def _step(run: Run, x: float | None = None, y: float | None = None, message: str = "edit") -> None:
    set_constants(run.paths.work, x=x, y=y)
    submit(run, message)


def _toy_scalar(x: float, y: float) -> float:
    a, b = 1 + 100 / (1 + (x - 7.0) ** 2), 1 + 100 / (1 + (y - 3.0) ** 2)
    return float((a * b) ** 0.5)


# -- migration through the commit policy ---------------------------------------------------------


def test_a_migrant_is_a_candidate_of_the_receiving_island(toy: Path, runs_root: Path, core_plugins: None) -> None:
    colony = _start(toy, runs_root)
    one, two = _island(colony, 1), _island(colony, 2)
    assert colony_of(one.paths) == colony and one.state.id == "island-1"
    _step(one, x=4.0, message="X to 4")
    # The donor's agent is mid-step and has forged a commit in work/.git: the migrant is
    # still what island-1's record and backup hold (v1, X = 4), never its work tree.
    set_constants(one.paths.work, x=7.0)
    forged = subprocess.run(["git", "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qam", "v9: 1e9"],
                            cwd=one.paths.work, capture_output=True, text=True)
    assert forged.returncode == 0, forged.stderr

    done = offer(two)
    assert done is not None and done.outcome == "accepted" and done.donor == "island-1"
    two = _island(colony, 2)
    v1 = two.state.versions[1]
    assert v1.scalar == pytest.approx(_toy_scalar(4.0, 1.0))  # measured here, by this island's evaluator
    assert "X = 4.0" in (two.paths.work / "solution.py").read_text()
    record = next(r for r in read_trajectory(two.paths) if r.get("kind") == "submit")
    assert record["migrant"] == {"colony": colony.name, "island": "island-1", "version": 1,
                                 "commit": _island(colony, 1).state.versions[1].sha,
                                 "scalar": _island(colony, 1).state.versions[1].scalar}
    assert record["secret"] and record["secret"] != _island(colony, 1).state.versions[1].secret  # a fresh secret
    message = commit_message(two.paths.backup, v1.sha) or ""
    assert message.startswith("v1: migrant from island-1 v1 of colony ")
    assert f"avo-migrant-colony: {colony.name}\navo-migrant-island: island-1\navo-migrant-version: v1\n" in message
    assert parse_trailers(message).scalar_matches(v1.scalar)  # avo's own trailers read back as ever
    events = [e for e in read_events(colony) if e.get("kind") == "migration"]
    assert [(e["receiver"], e["donor"], e["outcome"], e["version"]) for e in events] == [
        ("island-2", "island-1", "accepted", 1)]
    # The next prompt says what arrived, from where, and how to read the donor's lineage.
    prompt = variation_prompt(two)
    assert "## Migrants from other islands" in prompt and "island-1's v1 arrived" in prompt
    assert f"{colony / 'island-1'}/.avo/lineage.git" in prompt
    # Offered once: the same donor version again is skipped, and nothing is evaluated.
    before = two.state.evaluations
    again = offer(two)
    assert again is not None and again.outcome == "skipped" and "offered before" in again.reason
    assert _island(colony, 2).state.evaluations == before


def test_a_donor_whose_record_was_forged_gives_nothing(toy: Path, runs_root: Path, core_plugins: None) -> None:
    """A hostile agent on island-1 edits its run.json to claim a better best: island-2 is offered
    nothing (the donor's record is checked against its backup before anything is read)."""
    colony = _start(toy, runs_root)
    _step(_island(colony, 1), x=2.0)
    path = colony / "island-1" / "run.json"
    data = json.loads(path.read_text())
    data["versions"][1]["scalar"] = 1e9
    path.write_text(json.dumps(data))
    done = offer(_island(colony, 2))
    assert done is not None and done.outcome == "skipped" and "island-1 cannot be read" in done.reason
    two = _island(colony, 2)
    assert [v.n for v in two.state.versions] == [0] and two.state.evaluations == 1


def test_a_losing_migrant_is_archived_and_work_is_reset(toy: Path, runs_root: Path, core_plugins: None) -> None:
    colony = _start(toy, runs_root)
    one, two = _island(colony, 1), _island(colony, 2)
    _step(two, x=4.0, message="X to 4")
    _step(one, x=6.5, message="X to 6.5")
    done = offer(_island(colony, 1))  # island-1's ring neighbour is island-2 (2 islands: each other)
    assert done is not None and done.outcome == "rejected" and done.submitted is not None
    one = _island(colony, 1)
    assert [v.n for v in one.state.versions] == [0, 1] and "X = 6.5" in (one.paths.work / "solution.py").read_text()
    assert done.submitted.diff_path is not None and done.submitted.diff_path.parent == one.paths.rejected
    archived = done.submitted.diff_path.read_text()
    assert f"# migrant from {colony.name}/island-2 v1" in archived and "+X = 4.0" in archived
    rec = [r for r in read_trajectory(one.paths) if r.get("kind") == "submit"][-1]
    assert rec["outcome"] == "rejected" and rec["migrant"]["island"] == "island-2"
    assert "island-2's v1 arrived" in variation_prompt(one) and "rejected" in variation_prompt(one)


def test_a_migrant_keeps_the_islands_ignored_files_and_takes_none_of_them(toy: Path, runs_root: Path,
                                                                         core_plugins: None) -> None:
    colony = _start(toy, runs_root)
    two = _island(colony, 2)
    (two.paths.work / ".gitignore").write_text("scratch-*.txt\n")
    _step(two, x=2.0, message="X to 2, and ignore scratch files")
    (two.paths.work / "scratch-1.txt").write_text("the agent's measurements")  # ignored: survives resets
    _step(_island(colony, 1), x=5.0)
    done = offer(_island(colony, 2))
    assert done is not None and done.outcome == "accepted"
    two = _island(colony, 2)
    assert (two.paths.work / "scratch-1.txt").read_text() == "the agent's measurements"
    files = two.lineage.git("ls-tree", "-r", "--name-only", two.state.best_version.sha).split()
    assert sorted(files) == [".avo/scores.jsonl", "solution.py"]  # exactly the donor's files (no .gitignore)


def test_a_migrant_never_overwrites_an_agents_unsubmitted_candidate(toy: Path, runs_root: Path,
                                                                    core_plugins: None) -> None:
    colony = _start(toy, runs_root)
    _step(_island(colony, 1), x=4.0)
    two = _island(colony, 2)
    set_constants(two.paths.work, y=2.5)  # the agent of island-2 is mid-edit
    with pytest.raises(AvoError, match="unsubmitted candidate"):
        offer(two)
    assert "Y = 2.5" in (two.paths.work / "solution.py").read_text()
    assert _island(colony, 2).state.steps == 0


def test_best_topology_and_seed_only_donors(toy: Path, runs_root: Path, core_plugins: None) -> None:
    colony = _start(toy, runs_root, n=3, topology="best")
    skipped = offer(_island(colony, 1))
    assert skipped is not None and skipped.outcome == "skipped" and "beyond its seed" in skipped.reason
    _step(_island(colony, 2), x=3.0)
    _step(_island(colony, 3), x=5.0)
    done = offer(_island(colony, 1))  # the best of the others: island-3
    assert done is not None and done.donor == "island-3" and done.outcome == "accepted"


# -- unattended: the concurrent driver ----------------------------------------------------------


def test_three_islands_evolve_at_once_and_migrants_spread(tmp_path: Path, toy: Path, runs_root: Path,
                                                          scripts: dict[str, str]) -> None:
    env = _env(scripts, runs_root, AGENT_LAG="0.5")
    res = _avo(["evolve", "--target", str(toy), "--backend", "mock", "--islands", "3", "--max-steps", "5",
                "--migrate-every", "2", "--json-log"], env)
    assert res.returncode == 0, res.stderr
    colony = _colony(runs_root)
    state = load_colony(colony)
    assert state.names() == ["island-1", "island-2", "island-3"]
    assert state.migration.topology == "ring" and state.migration.every == 2
    events = [json.loads(line) for line in res.stdout.splitlines()]
    assert {e.get("island") for e in events if e.get("event") == "step_end"} == set(state.names())
    for k in (1, 2, 3):
        run = _island(colony, k)  # an ordinary run whose record checks against its lineage
        assert steps_taken(read_trajectory(run.paths)) == 5
        assert (run.paths.kb.is_dir() and run.paths.rejected.is_dir() and run.paths.supervisor.is_dir())
    one = _island(colony, 1)
    assert all("migrant" not in v.message for v in one.state.versions)  # it leads: its agent found its best
    two = _island(colony, 2)
    kept = [r for r in read_trajectory(two.paths) if r.get("kind") == "submit" and r.get("migrant")
            and r["outcome"] == "accepted"]
    assert kept and kept[0]["migrant"]["island"] == "island-1"  # island-2's only gains came from island-1
    assert two.state.best_version.scalar > two.state.seed_version.scalar
    assert Path(scripts["dir"], "island-2.saw-migrant").exists()  # its next prompt said what arrived
    stop = events[-1]
    assert stop["event"] == "colony_stop" and stop["best_island"] == "island-1"

    status = _avo(["status", "--run", str(colony), "--json"], env)
    assert status.returncode == 0, status.stderr
    summary = json.loads(status.stdout)
    assert summary["best_island"] == "island-1" and [r["steps"] for r in summary["islands"]] == [5, 5, 5]
    assert summary["islands"][1]["best_from"] == "migrant from island-1"
    assert summary["migrations"]["accepted"] >= 1
    text = _avo(["status", "--run", colony.name], env).stdout
    assert "island-1" in text and "island-3" in text and "colony best: island-1" in text
    log = _avo(["log", "--run", str(colony)], env).stdout
    assert "[migrant from island-1 v" in log
    assert _avo(["status", "--run", f"{colony}/island-2"], env).returncode == 0  # one island, as any run
    plot = _avo(["plot", "--run", str(colony), "-o", str(tmp_path / "colony.png")], env)
    assert plot.returncode == 0, plot.stderr
    assert (tmp_path / "colony.png").read_bytes()[:4] == b"\x89PNG"
    rep = _avo(["report", "--run", str(colony), "-o", str(tmp_path / "colony.html")], env)
    assert rep.returncode == 0, rep.stderr
    page = (tmp_path / "colony.html").read_text()
    assert "Migrations (" in page and "migrant from island-1" in page and "data:image/png;base64" in page


def test_sigkill_of_the_colony_loses_nothing_and_resume_continues_every_island(
        toy: Path, runs_root: Path, scripts: dict[str, str]) -> None:
    env = _env(scripts, runs_root, AGENT_HANG="1")
    proc = subprocess.Popen([sys.executable, "-m", "avo", "evolve", "--target", str(toy), "--backend", "mock",
                             "--islands", "3", "--max-steps", "4", "--migrate-every", "3", "--json-log"],
                            env=env, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    agents = Path(scripts["dir"])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(agents.glob("*.hanging"))) < 3:
        time.sleep(0.1)
    assert len(list(agents.glob("*.hanging"))) == 3, "the agents never reached their second step"
    colony = _colony(runs_root)
    before = {k: [v.sha for v in _island(colony, k).state.versions] for k in (1, 2, 3)}
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    # The islands' own `avo evolve` children die with the driver (nothing keeps stepping).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _processes_naming(colony):
        time.sleep(0.1)
    assert not _processes_naming(colony)

    for hanging in agents.glob("*.hanging"):  # the agents in flight were the killed children's children
        try:
            os.kill(int(hanging.read_text()), signal.SIGKILL)
        except ProcessLookupError:
            pass
    env.pop("AGENT_HANG")
    res = _avo(["evolve", "--resume", str(colony), "--plain"], env)
    assert res.returncode == 0, res.stderr + res.stdout
    for k in (1, 2, 3):
        run = _island(colony, k)
        records = read_trajectory(run.paths)
        assert [v.sha for v in run.state.versions][:len(before[k])] == before[k]  # no accepted version lost
        assert steps_taken(records) == 4
        kinds = [r["kind"] for r in records]
        assert kinds.count("evolve_start") == 2  # the resume continued this island
    assert "every island's budget is spent" in res.stdout


def _processes_naming(folder: Path) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(folder) in cmd and state != "Z":
            out.append(int(pid))
    return out


# -- session mode: two agents, two islands ------------------------------------------------------

DRIVER = textwrap.dedent('''
    import os, re, subprocess, sys, pathlib
    island, key, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    work = pathlib.Path(island) / "work"
    for i in range(steps):
        prompt = subprocess.run([sys.executable, "-m", "avo", "prompt", "--run", island], capture_output=True,
                                text=True, check=True).stdout
        sol = work / "solution.py"
        text = sol.read_text()
        value = float(re.search(rf"^{key} = (.*)$", text, re.M).group(1))
        sol.write_text(re.sub(rf"^{key} = .*$", f"{key} = {value + 1.0}", text, flags=re.M))
        res = subprocess.run([sys.executable, "-m", "avo", "submit", "--run", island, "-m", f"{key} up"],
                             capture_output=True, text=True)
        print(res.stdout, res.stderr, flush=True)
        if res.returncode != 0:
            sys.exit(res.returncode)
''')


def test_two_session_agents_drive_two_islands_at_once(tmp_path: Path, toy: Path, runs_root: Path,
                                                      scripts: dict[str, str]) -> None:
    env = _env(scripts, runs_root)
    res = _avo(["start", "--target", str(toy), "--islands", "2", "--migrate-every", "1", "--max-steps", "6"], env)
    assert res.returncode == 0, res.stderr
    colony = _colony(runs_root)
    assert f"avo prompt --run {colony}/island-2" in res.stdout
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    # island-1's agent improves X, island-2's improves Y: each gains from the other's migrants.
    procs = [subprocess.Popen([sys.executable, str(driver), str(colony / f"island-{k}"), key, "2"], env=env,
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for k, key in ((1, "X"), (2, "Y"))]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert any("migration (step" in o for o in outs), outs
    for k in (1, 2):
        run = _island(colony, k)
        records = [r for r in read_trajectory(run.paths) if r.get("kind") == "submit"]
        own = [r for r in records if not r.get("migrant")]
        assert len(own) == 2 and all(r["outcome"] == "accepted" for r in own)
        assert re.search(r"[XY] = ", (run.paths.work / "solution.py").read_text())
    accepted = [e for e in read_events(colony) if e.get("kind") == "migration" and e["outcome"] == "accepted"]
    assert accepted  # a migrant crossed over and its island kept it
    # MCP avo_status shows the colony side by side.
    from avo.mcp_server import AvoTools

    text = AvoTools(runs_root).status(colony.name)
    assert "island-1" in text and "island-2" in text and "colony best" in text


def test_cli_refuses_colony_flags_without_a_colony_and_bad_island_options(toy: Path, runs_root: Path,
                                                                          scripts: dict[str, str]) -> None:
    env = _env(scripts, runs_root)
    res = _avo(["evolve", "--target", str(toy), "--backend", "mock", "--parallel", "2"], env)
    assert res.returncode == 1 and "add --islands N" in res.stderr and "Traceback" not in res.stderr
    res = _avo(["evolve", "--target", str(toy), "--backend", "mock", "--islands", "2",
                "--island-option", "island-5:model=x"], env)
    assert res.returncode == 1 and "no island 'island-5'" in res.stderr
    res = _avo(["evolve", "--target", str(toy), "--backend", "mock", "--islands", "2", "--migration", "star"], env)
    assert res.returncode == 1 and "choose one of ring, best, none" in res.stderr
    assert not runs_root.exists() or not any(runs_root.iterdir())  # nothing was started


# -- the classic backend on game2048 (quick mode) -----------------------------------------------


def test_classic_colony_on_game2048_quick(tmp_path: Path, runs_root: Path) -> None:
    pytest.importorskip("avo_target_game2048")
    pytest.importorskip("avo_backend_classic")
    env = {**os.environ, "AVO_RUNS_DIR": str(runs_root), "AVO_SANDBOX": "none"}
    env.pop("AVO_DISABLE_PLUGIN_AUTOLOAD", None)
    res = _avo(["evolve", "--target", "game2048", "--backend", "classic", "--seed", "1", "--quick", "--islands", "3",
                "--max-steps", "3", "--migrate-every", "2", "--island-option", "island-3:seed=77",
                "--island-option", "2:backend=mock", "--island-option", "2:command=echo looked around",
                "--island-option", "2:supervisor_command=echo try the corner", "--plain"],
               env, timeout=600)
    assert res.returncode == 0, res.stderr + res.stdout
    colony = _colony(runs_root)
    seeds, backends = [], []
    for k in (1, 2, 3):
        run = _island(colony, k)
        records = read_trajectory(run.paths)
        assert steps_taken(records) == 3
        start = next(r for r in records if r["kind"] == "evolve_start")
        seeds.append(start["config"]["seed"])
        backends.append(start["config"]["backend"])
    assert seeds == [1, 1001, 77]  # distinct streams; island-3's own seed wins
    assert backends == ["classic", "mock", "classic"]  # island-2 is driven by its own backend
    two = read_trajectory(_island(colony, 2).paths)
    assert [r["outcome"] for r in two if r["kind"] == "agent_step"]  # its agent changed nothing...
    assert all(r.get("migrant") for r in two if r["kind"] == "submit")  # ...so all it measured were migrants
    status = json.loads(_avo(["status", "--run", str(colony), "--json"], env).stdout)
    assert [r["backend"] for r in status["islands"]] == [None, "mock", None]  # None: the colony's backend
    offers = [e for e in read_events(colony) if e.get("kind") == "migration"]
    assert len(offers) == 3  # each island's third step was a migration offer (evaluated or skipped)
    exported = tmp_path / "example"
    res = _avo(["export", "--run", str(colony), "-o", str(exported), "--no-plot"], env)
    assert res.returncode == 0, res.stderr
    res = _avo(["verify", str(exported)], env, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert [line.split(":")[0] for line in res.stdout.splitlines()] == ["island-1", "island-2", "island-3"]


EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "game2048-colony"


def test_the_shipped_colony_example_agrees_with_itself_and_reproduces(tmp_path: Path) -> None:
    """examples/game2048-colony: every island's bundle holds its recorded versions, the README's
    migration table is the colony's events, and each island's best replays to its score."""
    pytest.importorskip("avo_target_game2048")
    from avo.colony_report import verify_colony

    colony = load_colony(EXAMPLE)
    offers = [e for e in read_events(EXAMPLE) if e.get("kind") == "migration"]
    readme = (EXAMPLE / "README.md").read_text()
    table = readme.split("## Every migration offer")[1].split("Checked:")[0]
    assert len([line for line in table.splitlines() if line.startswith("| island-")]) == len(offers)
    for name in colony.names():
        state = json.loads((EXAMPLE / name / "run.json").read_text())
        tags = subprocess.run(["git", "ls-remote", "--tags", str(EXAMPLE / name / "lineage.bundle")],
                              capture_output=True, text=True, check=True).stdout
        listed = dict(reversed(line.split("\t")) for line in tags.splitlines())
        for v in state["versions"]:
            assert listed.get(f"refs/tags/v{v['n']}") == v["sha"]
        kept = [r for r in read_trajectory_file(EXAMPLE / name) if r.get("migrant") and r["outcome"] == "accepted"]
        clone = tmp_path / name
        subprocess.run(["git", "clone", "-q", str(EXAMPLE / name / "lineage.bundle"), str(clone)], check=True)
        for r in kept:  # an accepted migrant's commit names its origin
            message = subprocess.run(["git", "log", "-1", "--format=%B", state["versions"][r["version"]]["sha"]],
                                     cwd=clone, capture_output=True, text=True, check=True).stdout
            assert f"avo-migrant-island: {r['migrant']['island']}\navo-migrant-version: v{r['migrant']['version']}" \
                in message
    assert any(e["outcome"] == "accepted" for e in offers)
    results = verify_colony(EXAMPLE)
    assert [n for n, _ in results] == colony.names()
    assert all(res.ok for _, res in results), [res.detail for _, res in results]


def read_trajectory_file(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "trajectory.jsonl").read_text().splitlines()]


def test_max_cost_bounds_the_colony_as_a_whole(toy: Path, runs_root: Path, scripts: dict[str, str]) -> None:
    env = _env(scripts, runs_root)
    res = _avo(["evolve", "--target", str(toy), "--backend", "mock", "--islands", "3", "--max-steps", "10",
                "--max-cost", "0.006", "--plain"], env)
    assert res.returncode == 0, res.stderr
    colony = _colony(runs_root)
    from avo.evolve import spend_of

    spends = [spend_of(read_trajectory(_island(colony, k).paths))[0] for k in (1, 2, 3)]
    assert sum(spends) <= 0.006 + 1e-9  # each agent step costs 0.001: three islands share the 0.006
    assert all(s > 0 for s in spends)
    assert all(steps_taken(read_trajectory(_island(colony, k).paths)) < 10 for k in (1, 2, 3))
    assert "--max-cost" in res.stdout


def test_time_bounds_the_colony_as_a_whole(toy: Path, runs_root: Path, scripts: dict[str, str]) -> None:
    """`--time` is the colony's wall time: every island stops when it is spent, far short of
    a step budget the islands could not reach in it (island-2's agent takes 2 s a step)."""
    env = _env(scripts, runs_root, AGENT_LAG="2")
    res = _avo(["evolve", "--target", str(toy), "--backend", "mock", "--islands", "2", "--max-steps", "1000",
                "--time", "8s", "--plain"], env)
    assert res.returncode == 0, res.stderr
    assert "time budget spent" in res.stdout, res.stdout
    colony = _colony(runs_root)
    taken = [steps_taken(read_trajectory(_island(colony, k).paths)) for k in (1, 2)]
    assert all(0 < n < 1000 for n in taken), taken
    assert taken[1] <= 5, taken  # 2 s a step for 8 s; each island may finish the step it started


def test_ctrl_c_stops_every_island_cleanly(toy: Path, runs_root: Path, scripts: dict[str, str]) -> None:
    env = _env(scripts, runs_root, AGENT_HANG="1")
    proc = subprocess.Popen([sys.executable, "-m", "avo", "evolve", "--target", str(toy), "--backend", "mock",
                             "--islands", "2", "--max-steps", "4", "--plain"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    agents = Path(scripts["dir"])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(agents.glob("*.hanging"))) < 2:
        time.sleep(0.1)
    assert len(list(agents.glob("*.hanging"))) == 2
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "avo evolve --resume" in stderr
    colony = _colony(runs_root)
    for k in (1, 2):
        run = _island(colony, k)
        records = read_trajectory(run.paths)
        assert [(r["attempt"], r["phase"]) for r in records if r["kind"] == "interrupted"] == [(2, "agent")]
        assert not run.lineage.is_dirty(run.state.best_version.sha)  # the half-done step is archived
        assert list(run.paths.rejected.glob("reverted-*.diff"))
    for hanging in agents.glob("*.hanging"):
        try:
            os.kill(int(hanging.read_text()), signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_resume_starts_the_islands_a_killed_start_never_reached(toy: Path, runs_root: Path,
                                                                 scripts: dict[str, str]) -> None:
    from avo.colony import create_colony

    folder = create_colony("toy", runs_root, island_specs(2, {}), MigrationPolicy(),
                           {"target": str(toy), "max_steps": 2, "sandbox": "none"})
    env = _env(scripts, runs_root)
    res = _avo(["evolve", "--resume", str(folder), "--backend", "mock", "--max-steps", "2", "--plain"], env)
    assert res.returncode == 0, res.stderr
    assert "started island-1, which the interrupted start had not reached" in res.stderr
    for k in (1, 2):
        assert steps_taken(read_trajectory(_island(folder, k).paths)) == 2
    listed = _avo(["runs"], env).stdout
    assert folder.name in listed and "colony of 2 islands" in listed


def test_dashboard_has_one_row_per_island_and_the_colony_best() -> None:
    from rich.console import Console

    from avo.colony_view import render
    from avo.islands import ColonyProgress, IslandRow

    rows = {"island-1": IslandRow("island-1", "mock", steps=3, max_steps=6, best=12.0, best_version=2, seed=8.0,
                                  activity="step 4: agent working", last="accepted: X to 3"),
            "island-2": IslandRow("island-2", "classic", steps=2, max_steps=6, best=9.0, best_version=1, seed=8.0,
                                  migrants_in=1, accepted_in=1, activity="a migrant arrives")}
    console = Console(record=True, width=160)
    console.print(render(ColonyProgress("c1", "toy", "maximize", rows, 2)))
    text = console.export_text()
    assert "island-1" in text and "island-2" in text and "step 4: agent working" in text
    assert "1 (1 kept)" in text and "+50.0%" in text
    assert "colony best: island-1 v2 = 12" in text


def test_mcp_submit_on_an_island_offers_the_due_migrant(toy: Path, runs_root: Path, core_plugins: None) -> None:
    from avo.mcp_server import AvoTools

    colony = _start(toy, runs_root, every=1)
    _step(_island(colony, 2), x=4.0)  # a session on island-2 already has a version to give
    tools = AvoTools(runs_root)
    set_constants(_island(colony, 1).paths.work, y=2.0)
    text = tools.submit("Y to 2", run=f"{colony.name}/island-1")
    assert "ACCEPTED as v1" in text and "migration (step 2)" in text and "island-2 v1 arrived" in text
    one = _island(colony, 1)
    assert [r.get("migrant", {}).get("island") for r in read_trajectory(one.paths) if r.get("kind") == "submit"] \
        == [None, "island-2"]


def test_sigkill_during_a_migrants_evaluation_loses_nothing(tmp_path: Path, toy: Path, runs_root: Path,
                                                            scripts: dict[str, str]) -> None:
    # This toy evaluator hangs while island-2 measures X = 4.5 (the migrant), as long as HANG exists.
    hang, marker = tmp_path / "hang", tmp_path / "evaluating-migrant"
    ev = toy / "eval.py"
    ev.write_text(ev.read_text().replace(
        '    print(f"evaluating X={x} Y={y}")',
        f'    if x == 4.5 and "island-2" in str(workdir) and __import__("os").path.exists({str(hang)!r}):\n'
        f'        open({str(marker)!r}, "w").close()\n        import time; time.sleep(120)\n'
        '    print(f"evaluating X={x} Y={y}")'))
    env = _env(scripts, runs_root)
    res = _avo(["start", "--target", str(toy), "--islands", "2", "--migrate-every", "1", "--sandbox", "none"], env)
    assert res.returncode == 0, res.stderr
    colony = _colony(runs_root)
    one, two = colony / "island-1", colony / "island-2"
    set_constants(one / "work", x=4.5)
    assert _avo(["submit", "--run", str(one), "-m", "X to 4.5"], env).returncode == 0
    set_constants(two / "work", y=2.0)
    hang.touch()
    proc = subprocess.Popen([sys.executable, "-m", "avo", "submit", "--run", str(two), "-m", "Y to 2"], env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), "the migrant's evaluation never started"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    hang.unlink()
    assert _processes_naming(two)  # its evaluator outlived it (the next command of island-2 ends it)

    run = open_run(two, colony)  # the record checks against the lineage
    assert [v.message for v in run.state.versions] == ["seed x_0", "Y to 2"]  # the agent's version is kept
    assert "Y = 2.0" in (two / "work" / "solution.py").read_text() and "X = 1.0" in (
        two / "work" / "solution.py").read_text()  # work/ was never touched by the migrant
    assert not run.lineage.is_dirty(run.state.best_version.sha)
    # The next submit on island-2 records the killed one (a step used, interrupted), goes on as
    # usual, and the migrant is offered again (it was never decided).
    set_constants(two / "work", y=3.0)
    res = _avo(["submit", "--run", str(two), "-m", "Y to 3"], env)
    assert res.returncode == 0, res.stderr
    assert "step 2 is recorded as interrupted" in res.stdout
    assert "ACCEPTED as v2" in res.stdout and f"{colony.name}/island-1 v1 arrived" in res.stdout
    run = open_run(two, colony)
    rows = [(r.get("migrant", {}).get("island"), r["outcome"]) for r in read_trajectory(run.paths)
            if r.get("kind") == "submit"]
    assert rows[:3] == [(None, "accepted"), ("island-1", "interrupted"), (None, "accepted")]
    assert rows[3][0] == "island-1" and rows[3][1] in ("accepted", "rejected") and len(rows) == 4
    assert not _processes_naming(two)  # the killed submit's hanging evaluator is gone


def test_fewer_workers_than_islands_take_turns_in_rounds(toy: Path, runs_root: Path, scripts: dict[str, str]) -> None:
    env = _env(scripts, runs_root)
    res = _avo(["evolve", "--target", str(toy), "--backend", "mock", "--islands", "3", "--parallel", "1",
                "--max-steps", "4", "--migrate-every", "2", "--plain"], env)
    assert res.returncode == 0, res.stderr
    colony = _colony(runs_root)
    for k in (1, 2, 3):
        run = _island(colony, k)
        assert steps_taken(read_trajectory(run.paths)) == 4
        rounds = (run.paths.logs / "colony-driver.log").read_text().count("avo evolve --resume")
        assert rounds == 2  # two rounds of 2 steps, the migration interval
    # One at a time, island-1 finished its first round before island-2 began: island-2's first
    # migration (its step 3) was offered island-1's best, which by then had moved past the seed.
    two = [r for r in read_trajectory(_island(colony, 2).paths) if r.get("kind") == "submit" and r.get("migrant")]
    assert two and two[0]["step"] == 3 and two[0]["outcome"] == "accepted"
