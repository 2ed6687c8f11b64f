"""docs/DRIVING.md's shell transcript is real: run its commands and compare their output with it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "DRIVING.md"
REPO = DOC.parents[1]
DEMO = "/tmp/avo-demo"


def transcript() -> list[tuple[str, list[str]]]:
    """``(command, expected output lines)`` of the worked shell step."""
    text = DOC.read_text()
    block = text.split("## A worked step on the toy target (shell)")[1].split("```console\n")[1].split("```")[0]
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


def normalise(text: str, demo: str) -> str:
    text = text.replace(demo, DEMO)
    text = re.sub(r"toy-\d{8}-\d{6}", "toy-RUN", text)
    text = re.sub(r"\d{8}-\d{6}-", "STAMP-", text)
    text = re.sub(r"\(\d+\.\d s\)", "(N s)", text)
    # Which sandbox a machine offers (bubblewrap, or none with a warning) is not the doc's point.
    text = re.sub(r"^(sandbox: .*|warning: .*without isolation.*)$", "sandbox: LEVEL", text, flags=re.MULTILINE)
    return re.sub(r"^[0-9a-f]{7} ", "SHA ", text, flags=re.MULTILINE)


def matches(expected: list[str], actual: str) -> bool:
    """``expected`` lines against ``actual``; a line starting ``[...`` stands for any lines."""
    parts = ["(?:.*\n)*?" if line.startswith("[...") else re.escape(line) + "\n" for line in expected]
    return re.fullmatch("".join(parts), actual) is not None


def test_the_shell_transcript_is_what_avo_prints(tmp_path: Path) -> None:
    demo = str(tmp_path / "avo-demo")
    steps = transcript()
    assert [c.split()[0] for c, _ in steps[:2]] == ["export", "avo"]
    script = ["exec 2>&1", "set -e"]
    for i, (command, _) in enumerate(steps):
        command = command.replace(DEMO, demo)
        if command.startswith("RUN="):  # the run id differs on every start
            command = f"RUN=$(ls -d {demo}/runs/toy-*)"
        script += [f"echo '@@step {i}'", command]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "AVO_DISABLE_PLUGIN_AUTOLOAD": "1", "COLUMNS": "200",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("AVO_RUNS_DIR", None)
    proc = subprocess.run(["bash", "-c", "\n".join(script)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outputs = re.split(r"^@@step \d+\n", proc.stdout, flags=re.MULTILINE)[1:]
    assert len(outputs) == len(steps)
    for (command, expected), actual in zip(steps, outputs, strict=True):
        want = [normalise(line, DEMO) for line in expected]
        got = normalise(actual, demo)
        assert matches(want, got), f"$ {command}\n--- documented ---\n" + "\n".join(want) + f"\n--- real ---\n{got}"


def test_log_help_describes_what_attempts_prints() -> None:
    from typer.testing import CliRunner

    from avo.cli.app import app

    result = CliRunner().invoke(app, ["log", "--help"], env={"COLUMNS": "200"})
    text = " ".join(result.output.split())
    for word in ("accepted", "match", "rejected", "failed", "reverted", "scalar or error", "message"):
        assert word in text, word
