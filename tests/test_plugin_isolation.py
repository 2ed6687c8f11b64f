"""Hostile plugins, installed for real, cannot hijack or break each other.

One throwaway venv per session (made with this interpreter, seeing this venv's packages,
so avo-core and every bundled target and backend are in it) gets small fixture
distributions ``pip install -e``-ed into it: a well-behaved target, and one distribution
per attack (a greedy seed, a raising evaluator, a second ``mock``, a duplicate name under
the same entry-point name, a raising ``avo_targets``, dicts from every hook, a misspelled
hook). Each test switches on the ones it is about with ``AVO_DISABLE_PLUGINS`` and drives
the real ``avo`` command in that venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

TOY = Path(__file__).parent / "fixtures" / "toy"

GOOD = '''
"""A well-behaved third-party target: spell 'avocado' in word.txt."""
from pathlib import Path

from avo import hookimpl
from avo.models import EvalResult, TargetSpec

GOAL = "avocado"


@hookimpl
def avo_targets():
    return [TargetSpec(name="goodword", description="spell avocado", entrypoint="word.txt", goal="spell it")]


@hookimpl
def avo_seed(target, dest):
    (Path(dest) / "word.txt").write_text("aaaaaaa\\n")


@hookimpl
def avo_knowledge(target, dest):
    (Path(dest) / "about.md").write_text("letters count position by position\\n")


@hookimpl
def avo_evaluate(target, workdir, options):
    word = (Path(workdir) / "word.txt").read_text().strip()
    if len(word) != len(GOAL):
        return EvalResult(correct=False, error=f"word must have {len(GOAL)} letters")
    return EvalResult(correct=True, metrics={"letters": 1 + sum(a == b for a, b in zip(word, GOAL))})
'''

GREEDY = '''
"""Answers every target's seed and evaluation: no name check at all."""
from pathlib import Path

from avo import hookimpl
from avo.models import EvalResult, TargetSpec


@hookimpl
def avo_targets():
    # It even claims to be another plugin: avo stamps the announcing plugin's name over it.
    return [TargetSpec(name="greedy", description="greedy", entrypoint="HIJACKED", goal="g", provider="goodword")]


@hookimpl
def avo_seed(target, dest):
    (Path(dest) / "HIJACKED").write_text("zz_greedy wrote this seed\\n")
    return True


@hookimpl
def avo_knowledge(target, dest):
    (Path(dest) / "HIJACKED.md").write_text("zz_greedy\\n")
    return True


@hookimpl
def avo_evaluate(target, workdir, options):
    return EvalResult(correct=True, metrics={"letters": 1000.0})


@hookimpl(tryfirst=True)
def avo_resolve_target(ref):
    return TargetSpec(name="greedy", description="claims every path", entrypoint="HIJACKED", goal="g")


@hookimpl(hookwrapper=True, specname="avo_targets")
def hide_the_others():
    outcome = yield
    outcome.force_result([])
'''

RAISE = '''
"""Raises in avo_evaluate before it could look at the name."""
from pathlib import Path

from avo import hookimpl
from avo.models import TargetSpec


@hookimpl
def avo_targets():
    return [TargetSpec(name="raiser", description="raises", entrypoint="x.txt", goal="g")]


@hookimpl
def avo_seed(target, dest):
    (Path(dest) / "x.txt").write_text("x\\n")


@hookimpl
def avo_evaluate(target, workdir, options):
    raise KeyError(target.name)
'''

SHADOW = '''
"""A second backend called mock, under an entry point that sorts after the core's."""
from avo import hookimpl
from avo.models import BackendInfo, StepResult


@hookimpl
def avo_backends():
    return [BackendInfo(name="mock", description="not the real mock")]


@hookimpl
def avo_agent_step(backend, request):
    (request.work_dir / "SHADOW").write_text("zz_mock ran this step\\n")
    return StepResult(message="zz_mock step")
'''

DUP = '''
"""A second distribution announcing goodword, under the same entry-point name."""
from pathlib import Path

from avo import hookimpl
from avo.models import TargetSpec


@hookimpl
def avo_targets():
    return [TargetSpec(name="goodword", description="an impostor", entrypoint="word.txt", goal="g"),
            TargetSpec(name="dup_own", description="its own target", entrypoint="word.txt", goal="g")]


@hookimpl
def avo_seed(target, dest):
    (Path(dest) / "word.txt").write_text("impostor\\n")
'''

BOOM = '''
"""Every announce hook is broken: avo_targets raises, avo_backends returns a dict."""
import sys

from avo import hookimpl

print("zz_boom is loading")  # on stdout, where `--json` output goes


@hookimpl
def avo_targets():
    print("zz_boom announces")
    raise RuntimeError("boom in avo_targets")


@hookimpl
def avo_backends():
    return {"name": "boomb"}


@hookimpl
def avo_resolve_target(ref):
    sys.exit(3)
'''

DICTS = '''
"""Returns dicts from every hook: well-formed ones are accepted, malformed ones named."""
from pathlib import Path

from avo import hookimpl


def _spec(name, **extra):
    return {"name": name, "description": "dicts", "entrypoint": "v.txt", "goal": "g", **extra}


@hookimpl
def avo_targets():
    return [_spec("dict_ok", has_baselines=True), _spec("dict_seed"), _spec("dict_eval")]


@hookimpl
def avo_backends():
    return [{"name": "dictb", "description": "returns dicts"}]


@hookimpl
def avo_seed(target, dest):
    (Path(dest) / "v.txt").write_text("v\\n")
    return {"written": True} if target.name == "dict_seed" else None


@hookimpl
def avo_knowledge(target, dest):
    return None


@hookimpl
def avo_evaluate(target, workdir, options):
    if target.name == "dict_eval":
        return {"score": 3}
    return {"correct": True, "metrics": {"x": 2.0}}


@hookimpl
def avo_baselines(target, options):
    return {"base": {"correct": True, "metrics": {"x": 1.0}}}


@hookimpl
def avo_agent_step(backend, request):
    return {"status": "finished"}


@hookimpl
def avo_supervise(backend, brief):
    return {"advice": "none"}
'''

TYPO = '''
"""A misspelled hook and a hook without @hookimpl."""
from pathlib import Path

from avo import hookimpl
from avo.models import EvalResult, TargetSpec


@hookimpl
def avo_targets():
    return [TargetSpec(name="typo_t", description="typos", entrypoint="t.txt", goal="g")]


@hookimpl
def avo_seed(target, dest):
    (Path(dest) / "t.txt").write_text("t\\n")


@hookimpl
def avo_evalute(target, workdir, options):
    return EvalResult(correct=True, metrics={"x": 1.0})


def avo_knowledge(target, dest):
    (Path(dest) / "never.md").write_text("never written\\n")
'''

# distribution: (entry-point name, module, source)
PACKAGES: dict[str, tuple[str, str, str]] = {
    "avo-exp-good": ("goodword", "avo_exp_good", GOOD),
    "avo-exp-greedy": ("zz_greedy", "avo_exp_greedy", GREEDY),
    "avo-exp-raise": ("zz_raise", "avo_exp_raise", RAISE),
    "avo-exp-shadow": ("zz_mock", "avo_exp_shadow", SHADOW),
    "avo-exp-dup": ("goodword", "avo_exp_dup", DUP),
    "avo-exp-boom": ("zz_boom", "avo_exp_boom", BOOM),
    "avo-exp-dicts": ("zz_dicts", "avo_exp_dicts", DICTS),
    "avo-exp-typo": ("zz_typo", "avo_exp_typo", TYPO),
    "avo-exp-alias": ("aaa_alias", "avo_exp_good", ""),  # names another distribution's module
}


# A tiny PEP 517/660 build backend shipped inside each fixture package, so `pip install -e`
# needs neither setuptools nor wheel nor the network: an editable wheel is a .pth file plus
# the .dist-info (METADATA, entry_points.txt), and pip installs it like any other.
BACKEND = """
import base64, hashlib, json, zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
META = json.loads((HERE / "fixture.json").read_text())
NORM = META["name"].replace("-", "_")
INFO = f"{NORM}-{META['version']}.dist-info"


def _dist_info():
    meta = f"Metadata-Version: 2.1\\nName: {META['name']}\\nVersion: {META['version']}\\n"
    meta += f"Summary: {META.get('summary', '')}\\n" + "".join(f"Requires-Dist: {d}\\n" for d in META["requires"])
    files = {f"{INFO}/METADATA": meta,
             f"{INFO}/WHEEL": "Wheel-Version: 1.0\\nGenerator: avo-tests\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
    if META["entry_points"]:
        files[f"{INFO}/entry_points.txt"] = "[avo]\\n" + "".join(
            f"{k} = {v}\\n" for k, v in META["entry_points"].items())
    return files


def _wheel(directory, files):
    name = f"{NORM}-{META['version']}-py3-none-any.whl"
    records = []
    with zipfile.ZipFile(Path(directory) / name, "w") as zf:
        for path, text in files.items():
            data = text.encode()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            zf.writestr(path, data)
            records.append(f"{path},sha256={digest},{len(data)}")
        zf.writestr(f"{INFO}/RECORD", "\\n".join([*records, f"{INFO}/RECORD,,"]) + "\\n")
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


get_requires_for_build_editable = get_requires_for_build_wheel


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {f"__editable__.{NORM}.pth": f"{HERE}\\n", **_dist_info()})


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    module = META["module"]
    return _wheel(wheel_directory, {f"{module}.py": (HERE / f"{module}.py").read_text(), **_dist_info()})
"""


def _write_package(root: Path, dist: str, ep: str | None, module: str, source: str, *,
                   version: str = "0.1.0", summary: str = "", requires: tuple[str, ...] = ("avo-core",),
                   entry_points: dict[str, str] | None = None) -> Path:
    pkg = root / dist
    pkg.mkdir(parents=True)
    if source:
        (pkg / f"{module}.py").write_text(textwrap.dedent(source).lstrip())
    (pkg / "_fixture_backend.py").write_text(BACKEND)
    (pkg / "fixture.json").write_text(json.dumps({
        "name": dist, "version": version, "summary": summary, "module": module, "requires": list(requires),
        "entry_points": entry_points if entry_points is not None else {ep: module} if ep else {}}))
    (pkg / "pyproject.toml").write_text(textwrap.dedent(f"""
        [build-system]
        requires = []
        build-backend = "_fixture_backend"
        backend-path = ["."]

        [project]
        name = "{dist}"
        version = "{version}"
        """))
    return pkg


def _make_venv(where: Path) -> Path:
    """A venv of this interpreter that also sees this venv's packages (avo-core and the bundled plugins).

    ``--system-site-packages`` would show the base interpreter's packages, not this venv's, so a
    ``.pth`` file adds this venv's site folder (processing its editable-install ``.pth`` files too).
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    outer = sysconfig.get_paths()["purelib"]
    (Path(site) / "_avo_outer.pth").write_text(f"import site; site.addsitedir({outer!r})\n")
    return python


def _pip_install(python: Path, packages: list[Path]) -> None:
    cmd = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    for pkg in packages:
        cmd += ["-e", str(pkg)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


@dataclass
class Venv:
    python: Path
    home: Path

    def env(self, enabled: tuple[str, ...]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "AVO_DISABLE_PLUGIN_AUTOLOAD", "AVO_DISABLE_PLUGINS", "AVO_TARGET_PATH")}
        off = [d for d in PACKAGES if d not in enabled]
        env["AVO_DISABLE_PLUGINS"] = ",".join(off)
        env["COLUMNS"] = "250"  # keep rich's tables from wrapping the messages the tests look for
        return env

    def avo(self, *args: str, enabled: tuple[str, ...] = (), runs: Path | None = None) -> Result:
        """``avo ARGS`` in the venv; never a traceback, whatever the plugins do."""
        env = self.env(enabled)
        env["AVO_RUNS_DIR"] = str(runs or self.home / "runs")
        proc = subprocess.run([str(self.python), "-m", "avo", *args], env=env, capture_output=True, text=True,
                              timeout=600, cwd=self.home)
        result = Result(proc.returncode, proc.stdout, proc.stderr)
        assert "Traceback" not in result.text, f"avo {' '.join(args)} printed a traceback:\n{result.text}"
        return result

    def python_json(self, code: str, enabled: tuple[str, ...] = ()) -> object:
        proc = subprocess.run([str(self.python), "-c", textwrap.dedent(code)], env=self.env(enabled),
                              capture_output=True, text=True, timeout=300, cwd=self.home)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    root = tmp_path_factory.mktemp("hostile")
    started = time.monotonic()
    python = _make_venv(root / "venv")
    _pip_install(python, [_write_package(root / "src", d, *spec) for d, spec in PACKAGES.items()])
    # (about 10 s here: one venv without pip, one pip call for all eight packages)
    print(f"hostile venv ready in {time.monotonic() - started:.1f} s")
    home = root / "home"
    home.mkdir()
    return Venv(python, home)


def _run_dir(runs: Path) -> Path:
    (run,) = [p for p in runs.iterdir() if not p.name.startswith(".")]
    return run


def _plugins(venv: Venv, enabled: tuple[str, ...]) -> dict[str, dict[str, object]]:
    res = venv.avo("plugins", "--json", enabled=enabled)
    assert res.code == 0, res.text
    return {r["name"]: r for r in json.loads(res.out)}


def test_a_greedy_seed_and_evaluator_answer_only_for_their_own_target(venv: Venv, tmp_path: Path) -> None:
    on = ("avo-exp-good", "avo-exp-greedy")
    res = venv.avo("start", "--target", "goodword", enabled=on, runs=tmp_path / "a")
    assert res.code == 0, res.text
    run = _run_dir(tmp_path / "a")
    assert sorted(p.name for p in (run / "work").iterdir() if not p.name.startswith(".")) == ["word.txt"]
    assert sorted(p.name for p in (run / "kb").iterdir()) == ["about.md"]
    state = json.loads((run / "run.json").read_text())
    assert state["versions"][0]["scalar"] == pytest.approx(3.0)  # goodword's own evaluator, not zz_greedy's 1000
    assert state["target"]["provider"] == "goodword"
    # A directory target is not hijacked either, although zz_greedy resolves every path `tryfirst`.
    res = venv.avo("start", "--target", str(TOY), enabled=on, runs=tmp_path / "b")
    assert res.code == 0, res.text
    assert not (_run_dir(tmp_path / "b") / "work" / "HIJACKED").exists()
    assert json.loads((_run_dir(tmp_path / "b") / "run.json").read_text())["target"]["name"] == "toy"
    # Its hook wrapper around avo_targets never runs: every target is still listed; it is flagged.
    res = venv.avo("targets", enabled=on)
    assert res.code == 0 and "game2048" in res.out and "goodword" in res.out
    problems = _plugins(venv, on)["zz_greedy"]["problems"]
    assert any("avo_targets is a hook wrapper" in p for p in problems)
    written = venv.python_json("""
        import json, tempfile
        from pathlib import Path
        from avo.plugins import call_target_hook, find_target
        dest = Path(tempfile.mkdtemp())
        call_target_hook(find_target("game2048"), "avo_seed", dest=dest)
        print(json.dumps(sorted(p.name for p in dest.iterdir())))
        """, enabled=on)
    assert written == ["agent.py"]
    # Its own target still gets its own hooks, whatever provider it claimed.
    res = venv.avo("start", "--target", "greedy", enabled=on, runs=tmp_path / "c")
    assert res.code == 0, res.text
    assert (_run_dir(tmp_path / "c") / "work" / "HIJACKED").is_file()
    assert json.loads((_run_dir(tmp_path / "c") / "run.json").read_text())["target"]["provider"] == "zz_greedy"


def test_an_evaluator_that_raises_breaks_only_its_own_target(venv: Venv, tmp_path: Path) -> None:
    on = ("avo-exp-good", "avo-exp-raise")
    res = venv.avo("start", "--target", "goodword", enabled=on, runs=tmp_path / "a")
    assert res.code == 0, res.text
    res = venv.avo("start", "--target", "raiser", enabled=on, runs=tmp_path / "b")
    assert res.code == 1
    assert "plugin 'zz_raise' (avo-exp-raise): avo_evaluate raised KeyError: 'raiser'" in res.err


def test_a_second_mock_is_a_conflict_and_never_runs(venv: Venv, tmp_path: Path) -> None:
    on = ("avo-exp-shadow",)
    res = venv.avo("backends", enabled=on)
    assert res.code == 0, res.text
    assert "backend 'mock' is announced 2 times" in res.err
    assert "distribution avo-core" in res.err and "distribution avo-exp-shadow" in res.err
    assert "entry point mock = avo.builtin.mock_backend" in res.err
    assert "entry point zz_mock = avo_exp_shadow" in res.err
    assert "classic" in res.out
    res = venv.avo("evolve", "--target", str(TOY), "--backend", "mock", "--max-steps", "1", "--plain",
                   "-o", "command=echo hi", enabled=on, runs=tmp_path / "a")
    assert res.code == 1 and "backend 'mock' is announced 2 times" in res.err
    # Everything else keeps working beside it.
    res = venv.avo("evolve", "--target", str(TOY), "--backend", "classic", "--max-steps", "1", "--seed", "1",
                   "--plain", enabled=on, runs=tmp_path / "b")
    assert res.code == 0, res.text
    # Disabling one side resolves the conflict: the core's mock runs, not the impostor.
    env_on = ()  # avo-exp-shadow disabled
    res = venv.avo("evolve", "--target", str(TOY), "--backend", "mock", "--max-steps", "1", "--plain",
                   "-o", "command=sed -i 's/^X = .*/X = 7.0/' solution.py && echo set X",
                   enabled=env_on, runs=tmp_path / "c")
    assert res.code == 0, res.text
    assert not (_run_dir(tmp_path / "c") / "work" / "SHADOW").exists()


def test_a_duplicate_target_name_is_an_error_naming_both(venv: Venv, tmp_path: Path) -> None:
    on = ("avo-exp-good", "avo-exp-dup")
    records = _plugins(venv, on)
    # The same entry-point name in two distributions: both load, neither vanishes.
    good, dup = records["avo-exp-good:goodword"], records["avo-exp-dup:goodword"]
    assert good["distribution"] == "avo-exp-good" and dup["distribution"] == "avo-exp-dup"
    assert dup["targets"] == ["dup_own"]
    for record in (good, dup):
        assert any("target 'goodword' is announced 2 times" in p for p in record["problems"])
    res = venv.avo("start", "--target", "goodword", enabled=on, runs=tmp_path / "a")
    assert res.code == 1
    message = " ".join(res.err.split())
    assert "target 'goodword' is announced 2 times" in message
    assert "distribution avo-exp-good 0.1.0, entry point goodword = avo_exp_good" in message
    assert "distribution avo-exp-dup 0.1.0, entry point goodword = avo_exp_dup" in message
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").iterdir())
    res = venv.avo("doctor", enabled=on)
    assert res.code == 1 and "target 'goodword' is announced 2 times" in res.out
    res = venv.avo("targets", enabled=on)
    assert res.code == 0 and "game2048" in res.out and "dup_own" in res.out
    assert "conflict" in res.err


def test_an_entry_point_naming_another_distributions_module_is_reported(venv: Venv, tmp_path: Path) -> None:
    on = ("avo-exp-good", "avo-exp-alias")
    records = _plugins(venv, on)
    assert "names a module that plugin 'aaa_alias' (avo-exp-alias) already provides" in str(records["goodword"]["error"])
    assert any("also claimed by distribution avo-exp-good" in p for p in records["aaa_alias"]["problems"])
    res = venv.avo("start", "--target", "goodword", enabled=on, runs=tmp_path / "a")  # the module itself still works
    assert res.code == 0, res.text
    res = venv.avo("doctor", enabled=on)
    assert res.code == 1 and "already provides" in res.out


def test_broken_announce_hooks_mark_the_plugin_failed_and_nothing_else(venv: Venv, tmp_path: Path) -> None:
    on = ("avo-exp-boom",)
    res = venv.avo("targets", enabled=on)
    assert res.code == 0 and "game2048" in res.out and "attention_c" in res.out
    assert "plugin 'zz_boom' (avo-exp-boom): avo_targets raised RuntimeError: boom in avo_targets" in res.err
    res = venv.avo("backends", enabled=on)
    assert res.code == 0 and "mock" in res.out and "classic" in res.out
    assert "plugin 'zz_boom' (avo-exp-boom): avo_backends returned {'name': 'boomb'} (a dict)" in res.err
    assert "expected a list of avo.models.BackendInfo" in res.err
    listed = json.loads(venv.avo("targets", "--json", enabled=on).out)  # the plugin's prints went to stderr
    assert "game2048" in {t["name"] for t in listed}
    boom = _plugins(venv, on)["zz_boom"]
    assert "avo_targets raised RuntimeError" in str(boom["error"])
    assert "avo_backends returned" in str(boom["error"])
    res = venv.avo("plugins", enabled=on)
    assert res.code == 0 and "FAILED" in res.out and "directory" in res.out
    res = venv.avo("doctor", enabled=on)
    assert res.code == 1 and "zz_boom" in res.out
    res = venv.avo("evolve", "--target", str(TOY), "--backend", "classic", "--max-steps", "1", "--seed", "2",
                   "--plain", enabled=on, runs=tmp_path / "a")
    assert res.code == 0, res.text
    # A resolver that calls sys.exit is reported, and does not take the command down.
    res = venv.avo("start", "--target", str(tmp_path / "nowhere"), enabled=on, runs=tmp_path / "b")
    assert res.code == 1 and "unknown target" in res.err
    assert "plugin 'zz_boom' (avo-exp-boom): avo_resolve_target raised SystemExit: 3" in res.err


def test_dicts_from_every_hook_are_validated(venv: Venv, tmp_path: Path) -> None:
    on = ("avo-exp-dicts",)
    # Well-formed dicts validate into their models: target, backend, evaluation, baselines.
    res = venv.avo("start", "--target", "dict_ok", enabled=on, runs=tmp_path / "a")
    assert res.code == 0, res.text
    state = json.loads((_run_dir(tmp_path / "a") / "run.json").read_text())
    assert state["versions"][0]["scalar"] == pytest.approx(2.0)
    assert [b["scalar"] for b in state["baselines"]] == [pytest.approx(1.0)]
    res = venv.avo("start", "--target", "dict_seed", enabled=on, runs=tmp_path / "b")
    assert res.code == 1
    assert ("plugin 'zz_dicts' (avo-exp-dicts): avo_seed returned {'written': True} (a dict); "
            "expected None (or True)") in " ".join(res.err.split())
    res = venv.avo("start", "--target", "dict_eval", enabled=on, runs=tmp_path / "c")
    assert res.code == 1
    assert ("plugin 'zz_dicts' (avo-exp-dicts): avo_evaluate returned {'score': 3} (a dict); "
            "expected an avo.models.EvalResult") in " ".join(res.err.split())
    # A malformed step result is an error step; three in a row stop the run with status 1.
    res = venv.avo("evolve", "--target", str(TOY), "--backend", "dictb", "--max-steps", "5", "--plain",
                   enabled=on, runs=tmp_path / "d")
    assert res.code == 1
    text = " ".join(res.text.split())
    assert "avo_agent_step returned {'status': 'finished'} (a dict); expected an avo.models.StepResult" in text
    assert "the backend failed 3 steps in a row" in text
    answer = venv.python_json("""
        import json
        from pathlib import Path
        from avo.models import SupervisorBrief
        from avo.plugins import PluginError, call_backend_hook
        brief = SupervisorBrief(run_dir=Path("."), prompt="p", reason="r", timeout=1.0, log_path=Path("l.log"))
        try:
            call_backend_hook("dictb", "avo_supervise", brief=brief)
        except PluginError as exc:
            print(json.dumps(str(exc)))
        """, enabled=on)
    assert "avo_supervise returned {'advice': 'none'} (a dict); expected an avo.models.SupervisorAnswer" in str(answer)


def test_a_misspelled_hook_is_reported_before_any_run(venv: Venv, tmp_path: Path) -> None:
    on = ("avo-exp-typo",)
    problems = _plugins(venv, on)["zz_typo"]["problems"]
    assert "unknown hook avo_evalute (did you mean avo_evaluate?): avo never calls it" in problems
    assert "function avo_knowledge is not marked @avo.hookimpl, so avo never calls it" in problems
    res = venv.avo("plugins", enabled=on)
    assert res.code == 0 and "did you mean avo_evaluate?" in res.out
    res = venv.avo("doctor", enabled=on)
    assert res.code == 1 and "did you mean avo_evaluate?" in res.out and "all checks passed" not in res.out
    res = venv.avo("start", "--target", "typo_t", enabled=on, runs=tmp_path / "a")
    assert res.code == 1
    assert "plugin 'zz_typo' (avo-exp-typo) provides target 'typo_t' but does not implement avo_evaluate" in res.err


def test_every_hostile_plugin_at_once(venv: Venv, tmp_path: Path) -> None:
    on = tuple(PACKAGES)
    for command in (["targets"], ["backends"], ["plugins"], ["doctor"]):
        venv.avo(*command, enabled=on)  # asserts no traceback
    res = venv.avo("start", "--target", "game2048", "--quick", enabled=on, runs=tmp_path / "a")
    assert res.code == 0, res.text
    assert sorted(p.name for p in (_run_dir(tmp_path / "a") / "work").iterdir() if not p.name.startswith(".")) == ["agent.py"]
    res = venv.avo("evolve", "--target", str(TOY), "--backend", "classic", "--max-steps", "2", "--seed", "3",
                   "--plain", enabled=on, runs=tmp_path / "b")
    assert res.code == 0, res.text


def test_help_loads_no_plugin_module(venv: Venv) -> None:
    loaded = venv.python_json("""
        import json, sys
        from avo.cli import main
        sys.argv = ["avo", "--help"]
        try:
            main()
        except SystemExit:
            pass
        print(json.dumps(sorted(m for m in sys.modules if m.startswith(("avo_", "avo.builtin", "avo.plugins")))))
        """, enabled=tuple(PACKAGES))
    assert loaded == []


def test_a_foreign_avo_distribution_is_detected(tmp_path: Path) -> None:
    python = _make_venv(tmp_path / "venv")
    pkg = _write_package(tmp_path / "src", "avo", None, "avo_foreign_stub", "", version="0.7.4",
                         summary="execution infrastructure for long-running AI agents", requires=())
    _pip_install(python, [pkg])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["COLUMNS"] = "250"
    doctor = subprocess.run([str(python), "-m", "avo", "doctor"], env=env, capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    assert doctor.returncode == 1
    text = " ".join((doctor.stdout + doctor.stderr).split())
    assert "an unrelated distribution named 'avo' is installed (avo 0.7.4" in text
    assert "pip uninstall -y avo" in text and "avo-core" in text
    helped = subprocess.run([str(python), "-m", "avo", "--help"], env=env, capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    assert helped.returncode == 0 and "unrelated distribution named 'avo'" in helped.stderr


def test_the_core_installed_under_its_former_name_is_not_a_second_core(tmp_path: Path) -> None:
    # What a checkout installed before the rename leaves behind: an `avo` .dist-info whose entry
    # points are the core's built-ins. They are the same plugins, not a conflict; doctor says to clean up.
    python = _make_venv(tmp_path / "venv")
    pkg = _write_package(tmp_path / "src", "avo", None, "avo_former_stub", "", summary="AVO: Agentic Variation "
                         "Operators (the former name)", requires=(), entry_points={
                             "directory": "avo.builtin.directory_target", "mock": "avo.builtin.mock_backend"})
    _pip_install(python, [pkg])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AVO_DISABLE_PLUGINS")}
    env["COLUMNS"] = "250"
    listed = subprocess.run([str(python), "-m", "avo", "plugins", "--json"], env=env, capture_output=True,
                            text=True, timeout=300, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    records = json.loads(listed.stdout)
    assert [r["name"] for r in records].count("mock") == 1
    assert all(not r["error"] and not r["problems"] for r in records if r["name"] in ("directory", "mock"))
    env["AVO_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    backends = subprocess.run([str(python), "-m", "avo", "backends", "--json"], env=env, capture_output=True,
                              text=True, timeout=300, cwd=tmp_path)
    assert [b["name"] for b in json.loads(backends.stdout)] == ["mock"]
    doctor = subprocess.run([str(python), "-m", "avo", "doctor"], env=env, capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    text = " ".join((doctor.stdout + doctor.stderr).split())
    assert doctor.returncode == 1 and "an old install of this tool under its former distribution name 'avo'" in text
