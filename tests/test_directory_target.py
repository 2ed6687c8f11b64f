"""target.yaml validation and the directory target's behaviour."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from avo.builtin.directory_target import spec_from_folder
from avo.errors import SpecError
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
