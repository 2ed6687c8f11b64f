"""The MCP server, driven by the real ``mcp`` client over stdio against a child process.

One server process (``python -m avo.mcp_server`` with ``AVO_RUNS_DIR`` set) serves the
whole module; every test starts its own run on a private copy of the toy target and
passes the run id explicitly. The agent's edits are made directly in ``work/``, as an
agent would make them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.conftest import FIXTURES, set_constants

TOOLS = {
    "avo_list_targets", "avo_start_run", "avo_next_step", "avo_evaluate", "avo_submit", "avo_revert",
    "avo_status", "avo_lineage", "avo_supervisor_brief", "avo_record_supervisor", "avo_plot",
}


@dataclass
class Client:
    """A blocking face on an MCP client session that lives in a portal's event loop."""

    portal: BlockingPortal
    session: ClientSession
    runs: Path
    toy: Path

    def call(self, name: str, **arguments: Any) -> tuple[bool, str]:
        result = self.portal.call(self.session.call_tool, name, arguments)
        text = "\n".join(c.text for c in result.content if c.type == "text")
        return bool(result.is_error), text

    def ok(self, name: str, **arguments: Any) -> str:
        is_error, text = self.call(name, **arguments)
        assert not is_error, f"{name} failed: {text}"
        return text

    def error(self, name: str, **arguments: Any) -> str:
        is_error, text = self.call(name, **arguments)
        assert is_error, f"{name} should have failed but returned: {text}"
        return text

    def start(self, **options: Any) -> tuple[str, Path, str]:
        """Start a run on the toy target; returns (run id, its work dir, the start text)."""
        text = self.ok("avo_start_run", target=str(self.toy), **options)
        match = re.search(r"^started (\S+): x_0 = ", text, re.MULTILINE)
        assert match, text
        run_id = match.group(1)
        return run_id, self.runs / run_id / "work", text


def _params(args: list[str], runs: Path, cwd: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=args, cwd=str(cwd),
        env={"AVO_RUNS_DIR": str(runs), "AVO_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )


@asynccontextmanager
async def _connect(params: StdioServerParameters) -> AsyncIterator[ClientSession]:
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    root = tmp_path_factory.mktemp("mcp")
    runs, toy = root / "runs", root / "toy"
    shutil.copytree(FIXTURES / "toy", toy, ignore=shutil.ignore_patterns("__pycache__"))
    params = _params(["-m", "avo.mcp_server"], runs, root)
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(_connect(params)) as session:
        yield Client(portal, session, runs, toy)


def _git(work: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=work, capture_output=True, text=True, check=True).stdout


def test_lists_the_eleven_tools_with_schemas(client: Client) -> None:
    tools = {t.name: t for t in client.portal.call(client.session.list_tools).tools}
    assert set(tools) == TOOLS
    for name, tool in tools.items():
        assert tool.description and len(tool.description) > 60, name
        assert tool.input_schema["type"] == "object"
        if name != "avo_list_targets":
            assert "run" in tool.input_schema["properties"], name
    assert tools["avo_submit"].input_schema["required"] == ["message"]
    assert tools["avo_record_supervisor"].input_schema["required"] == ["text"]
    assert set(tools["avo_start_run"].input_schema["properties"]) == {
        "target", "run", "max_steps", "quick", "stall_limit", "from_run", "executor", "executor_options"}
    assert {"executor", "executor_options"} <= set(tools["avo_evaluate"].input_schema["properties"])
    assert "required" not in tools["avo_status"].input_schema
    assert tools["avo_status"].annotations is not None and tools["avo_status"].annotations.read_only_hint
    assert tools["avo_revert"].annotations is not None and tools["avo_revert"].annotations.destructive_hint


def test_list_targets_names_the_builtin_hint_and_runs_dir(client: Client) -> None:
    text = client.ok("avo_list_targets")
    assert "target.yaml" in text
    assert f"Runs directory: {client.runs.resolve()}" in text


def test_full_step_then_stall_supervisor_and_redirect(client: Client) -> None:
    run_id, work, text = client.start(max_steps=20)
    assert "# avo — step 1 of 20 — target `toy`" in text
    assert "avo_submit" in text and f"{work}/" in text
    assert _git(work, "tag").split() == ["v0"]

    prompt = client.ok("avo_next_step", run=run_id)
    assert "step 1 of 20" in prompt and "| v0 ★ |" in prompt

    # The agent edits work/ directly, evaluates (no lineage change), then submits.
    set_constants(work, x=6)
    evaluated = client.ok("avo_evaluate", run=run_id)
    assert evaluated.startswith("PASS  scalar ") and "vs best v0" in evaluated
    assert re.search(r"\(\+\d+\.\d+% vs best v0", evaluated), evaluated
    assert "config_a" in evaluated and "log: logs/" in evaluated
    assert _git(work, "tag").split() == ["v0"]
    assert "work/ has uncommitted changes" in client.ok("avo_status", run=run_id)

    submitted = client.ok("avo_submit", run=run_id, message="move X towards the optimum")
    assert "ACCEPTED as v1 (new best)" in submitted
    assert "next: call avo_next_step" in submitted
    assert _git(work, "tag").split() == ["v0", "v1"]
    assert _git(work, "log", "-1", "--format=%s", "v1").strip() == "v1: move X towards the optimum"

    status = client.ok("avo_status", run=run_id)
    assert f"run {run_id}  target toy (maximize)" in status
    assert "best v1 = " in status and "steps 1/20, 2 versions" in status
    assert "uncommitted" not in status

    lineage = client.ok("avo_lineage", run=run_id)
    assert "| v0 |" in lineage and "| v1 ★ |" in lineage and "move X towards the optimum" in lineage

    # An experiment discarded with avo_revert never reaches the lineage.
    set_constants(work, y=9)
    assert "reverted work/ to v1; the discarded diff is rejected/reverted-" in client.ok("avo_revert", run=run_id)
    assert "Y = 1.0" in (work / "solution.py").read_text()

    # Three non-improving submits stall the run: the supervisor becomes due.
    outcomes = []
    for x in (2, 3, 4):
        set_constants(work, x=x)
        outcomes.append(client.ok("avo_submit", run=run_id, message=f"try X = {x}"))
    assert all("REJECTED" in o and "work/ reset to v1" in o for o in outcomes)
    assert "SUPERVISOR DUE" not in outcomes[1]
    assert "SUPERVISOR DUE: stalled: 3 steps without a new best" in outcomes[2]
    assert "call avo_supervisor_brief" in outcomes[2]
    attempts = client.ok("avo_lineage", run=run_id, attempts=True)
    # The revert above is an attempt too (issue 15), listed where it happened...
    assert [line.split()[2] for line in attempts.splitlines() if line.startswith("step ")] == [
        "accepted", "rejected", "rejected", "rejected"]
    # ...named by the step it came after: a revert uses no step.
    assert attempts.splitlines()[1].startswith("after step 1: reverted, no step used")

    blocked = client.error("avo_next_step", run=run_id)
    assert "blocked: the supervisor is due (stalled: 3 steps without a new best)" in blocked
    assert "Via MCP: call avo_supervisor_brief" in blocked
    assert "SUPERVISOR DUE" in client.ok("avo_status", run=run_id)

    brief = client.ok("avo_supervisor_brief", run=run_id)
    assert f"# Supervisor review — run {run_id}" in brief and "stalled" in brief
    assert "avo_record_supervisor" in brief
    assert (client.runs / run_id / "supervisor" / "brief-001.md").is_file()

    redirect = "1. Tune Y, not X: config_b has not moved since x_0.\n2. Try Y = 3 first."
    recorded = client.ok("avo_record_supervisor", run=run_id, text=redirect)
    assert "redirect recorded (supervisor/redirect-001.md)" in recorded

    prompt = client.ok("avo_next_step", run=run_id)
    assert "## Supervisor redirect" in prompt and "Tune Y, not X" in prompt
    assert "step 5 of 20" in prompt


def test_resume_by_id_returns_status_and_prompt(client: Client) -> None:
    run_id, _, _ = client.start()
    resumed = client.ok("avo_start_run", run=run_id)
    assert resumed.startswith(f"resumed {run_id}\nrun {run_id}  target toy")
    assert "# avo — step 1 — target `toy`" in resumed
    assert "give either run" in client.error("avo_start_run", run=run_id, target=str(client.toy))


def test_start_from_another_runs_version_and_spent_budget(client: Client) -> None:
    source, _, _ = client.start()
    text = client.ok("avo_start_run", from_run=f"{source}:v0", max_steps=1)
    child = re.search(r"^started (\S+): ", text, re.MULTILINE)
    assert child, text
    child_id, work = child.group(1), client.runs / child.group(1) / "work"
    assert f"seed from {source}:v0" in client.ok("avo_lineage", run=child_id)
    assert "outside the runs directory" in client.error("avo_start_run", from_run="/etc:v0")

    set_constants(work, y=3)
    assert "ACCEPTED as v1" in client.ok("avo_submit", run=child_id, message="Y 1 -> 3")
    spent = client.error("avo_next_step", run=child_id)
    assert "step budget of this run is spent (1/1 steps)" in spent
    assert f"avo_start_run(from_run={child_id!r})" in spent


def test_bad_requests_are_tool_errors_and_the_server_keeps_serving(client: Client, tmp_path: Path) -> None:
    run_id, work, _ = client.start()

    outside = client.error("avo_status", run=str(tmp_path))
    assert "outside the runs directory" in outside
    assert "outside the runs directory" in client.error("avo_status", run="../toy")
    assert "outside the runs directory" in client.error("avo_plot", run=run_id, output=str(tmp_path / "p.png"))
    assert "no run 'no-such-run'" in client.error("avo_status", run="no-such-run")

    nothing = client.error("avo_submit", run=run_id, message="no change at all")
    assert "nothing to submit: work/ is identical to the best version v0" in nothing
    assert "message is empty" in client.error("avo_submit", run=run_id, message="   ")
    assert "give target" in client.error("avo_start_run")
    assert "no-such-target" in client.error("avo_start_run", target="no-such-target")
    assert "max_steps" in client.error("avo_start_run", target=str(client.toy), max_steps=0)

    # An unexpected failure inside a tool is reported by type and message, not as a crash.
    unexpected = client.error("avo_status", run="bad\x00id")
    assert "internal error (ValueError: embedded null byte)" in unexpected

    # A broken candidate is a normal outcome, not a tool error.
    sol = work / "solution.py"
    sol.write_text(sol.read_text().replace("return n * n", "return n + n"))
    failed = client.ok("avo_submit", run=run_id, message="break square")
    assert "FAILED (not scored)" in failed and "square(" in failed

    status = client.ok("avo_status", run=run_id)
    assert "steps 1, 1 versions" in status


def test_plot_writes_into_the_run_folder(client: Client) -> None:
    run_id, work, _ = client.start()
    set_constants(work, x=5)
    client.ok("avo_submit", run=run_id, message="X = 5")
    text = client.ok("avo_plot", run=run_id, output="plots/progress.png", attempts=True)
    path = client.runs / run_id / "plots" / "progress.png"
    assert text == f"plot written to {path.resolve()}"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert ".png, .svg or .pdf" in client.error("avo_plot", run=run_id, output="progress.txt")
    assert "Input should be 'version' or 'time'" in client.error("avo_plot", run=run_id, x="steps")


def test_avo_mcp_command_serves_the_same_tools(tmp_path: Path) -> None:
    params = _params(["-m", "avo", "mcp", "--runs-dir", str(tmp_path / "elsewhere")], tmp_path / "runs", tmp_path)

    async def tool_names_and_status() -> tuple[set[str], str]:
        async with _connect(params) as session:
            names = {t.name for t in (await session.list_tools()).tools}
            result = await session.call_tool("avo_list_targets", {})
            return names, "\n".join(c.text for c in result.content if c.type == "text")

    with start_blocking_portal() as portal:
        names, text = portal.call(tool_names_and_status)
    assert names == TOOLS
    assert f"Runs directory: {(tmp_path / 'elsewhere').resolve()}" in text  # --runs-dir wins over the env


def test_avo_help_does_not_import_mcp() -> None:
    code = (
        "import sys\nfrom avo.cli import main\nsys.argv = ['avo', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('LOADED', sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types', 'anyio')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "mcp" in out  # the help lists the command
    assert out.strip().splitlines()[-1] == "LOADED []"


def test_agent_docs_name_every_tool() -> None:
    import yaml

    repo = Path(__file__).parent.parent
    driving = (repo / "docs" / "DRIVING.md").read_text()
    agents = (repo / "AGENTS.md").read_text()
    skill = (repo / ".claude" / "skills" / "avo" / "SKILL.md").read_text()
    assert set(re.findall(r"^\| `(avo_\w+)` \|", driving, re.MULTILINE)) == TOOLS
    assert set(re.findall(r"\| `(avo_\w+)", agents)) == TOOLS
    assert "claude mcp add avo -s user -- python3 -m avo.mcp_server" in driving
    assert "codex mcp add avo -- python3 -m avo.mcp_server" in driving
    front = yaml.safe_load(skill.split("---\n")[1])
    assert front["name"] == "avo" and "avo" in front["description"]
    assert set(re.findall(r"\b(avo_\w+)\(", skill)) <= TOOLS
