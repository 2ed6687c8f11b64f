"""target.yaml validation and the directory target's behaviour."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from avo.builtin.directory_target import spec_from_folder
from avo.engine import start_run
from avo.errors import SpecError
from avo.evaluation import evaluate_dir
from avo.models import parse_duration
from avo.plugins import find_target


def write_spec(toy: Path, text: str) -> None:
    (toy / "target.yaml").write_text(text)


BASE = """name: toy
entrypoint: solution.py
evaluate:
  command: ["{python}", "{target}/eval.py", "--workdir", "{workdir}"]
  timeout: 30m
"""


def test_valid_spec_fields(toy: Path) -> None:
    spec = spec_from_folder(toy)
    assert spec.name == "toy" and spec.eval_timeout == 60 and spec.has_baselines
    assert spec.directory == toy.resolve() and spec.direction == "maximize"
    assert "square(n)" in spec.goal


@pytest.mark.parametrize(
    ("text", "field", "problem"),
    [
        (BASE.replace("  timeout: 30m", "  timeout: soon"), "evaluate.timeout", "expected a duration"),
        (BASE.replace("entrypoint: solution.py\n", ""), "entrypoint", "required field is missing"),
        (BASE + "score:\n  direction: up\n", "score.direction", "'maximize' or 'minimize'"),
        (BASE + "colour: blue\n", "colour", "unknown field"),
        (BASE.replace('  command: ["{python}", "{target}/eval.py", "--workdir", "{workdir}"]', "  command: []"),
         "evaluate.command", "at least 1 item"),
        (BASE.replace("name: toy", "name: 'bad name!'"), "name", "should match pattern"),
        (BASE + "score:\n  noise:\n    band: 2\n", "score.noise.band", "less than 1"),
        (BASE.replace("  timeout: 30m", "  timeout: 30m\n  isolation: box"), "evaluate.isolation",
         "'evaluator' or 'candidate'"),
    ],
)
def test_bad_spec_names_file_field_and_expectation(toy: Path, text: str, field: str, problem: str) -> None:
    write_spec(toy, text)
    with pytest.raises(SpecError) as info:
        spec_from_folder(toy)
    message = str(info.value)
    assert str(toy / "target.yaml") in message
    assert f"field '{field}'" in message and problem in message


def test_yaml_syntax_and_missing_folders(toy: Path) -> None:
    write_spec(toy, "name: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        spec_from_folder(toy)
    write_spec(toy, BASE + "seed: nowhere\n")
    with pytest.raises(SpecError, match=r"field 'seed': folder .*nowhere does not exist"):
        spec_from_folder(toy)
    write_spec(toy, "- just\n- a list\n")
    with pytest.raises(SpecError, match="expected a mapping"):
        spec_from_folder(toy)


def test_target_path_env_lists_directory_targets(toy: Path, monkeypatch: pytest.MonkeyPatch, core_plugins: None) -> None:
    monkeypatch.setenv("AVO_TARGET_PATH", str(toy.parent))
    assert find_target("toy").directory == toy.resolve()
    assert find_target(str(toy)).name == "toy"


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800), ("1.5h", 5400), ("2d", 172800), (12, 12)])
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_bad_durations() -> None:
    for bad in ("-1s", "0", "ten minutes", "5 parsecs"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_an_edit_is_seen_even_with_its_size_and_mtime_put_back(toy: Path) -> None:
    # target.yaml is read once per submit and remembered; the memory is keyed on the file's
    # change time too, which `touch -r` cannot set back.
    write_spec(toy, BASE + "score:\n  direction: maximize\n")
    assert spec_from_folder(toy).direction == "maximize"
    spec = toy / "target.yaml"
    st = spec.stat()
    write_spec(toy, BASE + "score:\n  direction: minimize\n")
    assert spec.stat().st_size == st.st_size
    os.utime(spec, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert spec_from_folder(toy).direction == "minimize"
    write_spec(toy, BASE + "seed: nowhere\n")  # the folder check runs on every read, remembered or not
    with pytest.raises(SpecError, match="nowhere does not exist"):
        spec_from_folder(toy)
    with pytest.raises(SpecError, match="nowhere does not exist"):
        spec_from_folder(toy)


ISOLATION = "  isolation: candidate  # eval.py starts solution.py through $AVO_CANDIDATE_PREFIX\n"


@pytest.mark.parametrize("isolation", ["candidate", "evaluator"])
def test_the_toy_scores_the_same_in_either_isolation(toy: Path, tmp_path: Path, isolation: str) -> None:
    if isolation == "evaluator":
        text = (toy / "target.yaml").read_text()
        write_spec(toy, text.replace(ISOLATION, ""))
    spec = spec_from_folder(toy)
    assert spec.isolate_candidate is (isolation == "candidate")
    work = tmp_path / "work"
    shutil.copytree(toy / "seed", work)
    evaluation = evaluate_dir(spec, work, tmp_path / "eval.log")
    assert evaluation.result.correct and evaluation.result.metrics == pytest.approx({"config_a": 1 + 100 / 37, "config_b": 21.0})


# An evaluator that says what it and its candidate see: processes in /proc, and whether the
# candidate can write its workdir and read the evaluator's own folder.
PROBE_EVAL = r'''
import json, os, subprocess, sys
workdir = sys.argv[1]
prefix = json.loads(os.environ["AVO_CANDIDATE_PREFIX"])
probe = ("import os, sys; open('made.txt', 'w').write('x'); "
         "print(len([p for p in os.listdir('/proc') if p.isdigit()]), os.path.exists(sys.argv[1]))")
seen = subprocess.run([*prefix, sys.executable, "-c", probe, os.path.dirname(__file__)], cwd=workdir,
                      stdout=subprocess.PIPE, text=True, check=True).stdout.split()
mine = len([p for p in os.listdir("/proc") if p.isdigit()])
print(json.dumps({"correct": True, "metrics": {"score": 1.0},
                  "notes": json.dumps({"prefix": prefix, "evaluator": mine, "candidate": int(seen[0]),
                                       "reads_evaluator": seen[1] == "True",
                                       "wrote": os.path.exists(os.path.join(workdir, "made.txt"))})}))
'''


@pytest.mark.parametrize("level", ["bwrap", "none"])
def test_isolation_candidate_sandboxes_the_candidate_alone(
        toy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, level: str) -> None:
    from avo.sandbox import probe

    if level == "bwrap" and not probe()[0]:
        pytest.fail(f"bubblewrap is required for this test: {probe()[1]}")
    monkeypatch.setenv("AVO_SANDBOX", level)
    (toy / "eval.py").write_text(PROBE_EVAL)
    text = (toy / "target.yaml").read_text()
    write_spec(toy, text.replace('"--workdir", "{workdir}"]', '"{workdir}"]'))
    spec = spec_from_folder(toy)
    work = tmp_path / "work"
    work.mkdir()
    evaluation = evaluate_dir(spec, work, tmp_path / "eval.log")
    assert evaluation.result.correct, evaluation.result.error
    seen = json.loads(evaluation.result.notes or "")
    assert seen["wrote"]  # the candidate may write its workdir
    if level == "none":  # nothing to put before it: the run records that it had no sandbox
        assert seen["prefix"] == [] and seen["reads_evaluator"]
    else:
        # bubblewrap by its absolute path, from the system's folders (never a bwrap on the agent's PATH)
        assert seen["prefix"][0].startswith("/") and seen["prefix"][0].endswith("/bwrap")
        assert seen["prefix"][-1] == "--"
        assert seen["candidate"] <= 3 < seen["evaluator"]  # a PID namespace of its own
        assert not seen["reads_evaluator"]


def test_a_run_of_a_directory_target_without_isolation_warns_at_its_start(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    said: list[str] = []
    start_run(str(toy), runs_root, progress=said.append)
    assert not [line for line in said if "isolation: candidate" in line]
    write_spec(toy, (toy / "target.yaml").read_text().replace(ISOLATION, ""))
    start_run(str(toy), runs_root, progress=said.append)
    warnings = [line for line in said if "isolation: candidate" in line]
    assert len(warnings) == 1 and "/proc" in warnings[0] and "$AVO_CANDIDATE_PREFIX" in warnings[0]
