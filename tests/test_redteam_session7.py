"""Red team, round seven: a same-user agent's environment and a race around the evaluator copy.

Each test is the hostile action itself, on a real run of the toy target; each one moved a score
(or ran the agent's program as avo) before the fix.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from avo.engine import start_run, submit
from avo.sandbox import probe


def _impostor(folder: Path, name: str, log: Path) -> None:
    """A program called ``name`` in ``folder`` that notes each start in ``log``, then runs the real one."""
    real = shutil.which(name)
    assert real is not None, f"{name} is not installed"
    script = folder / name
    script.write_text(f"#!/bin/sh\necho \"$0 $*\" >> '{log}'\nexec '{real}' \"$@\"\n")
    script.chmod(0o755)


def _x(work: Path, x: float) -> None:
    solution = work / "solution.py"
    solution.write_text(solution.read_text().replace("X = 1.0", f"X = {x}"))


def test_a_bwrap_or_git_first_on_the_agents_path_never_runs(toy: Path, tmp_path: Path, runs_root: Path) -> None:
    # Round seven: `PATH=fake:$PATH avo submit` — the toy evaluator (isolation: candidate) started its
    # candidate through "bwrap" found on that PATH, a fake that ran it unsandboxed and wrote a forged
    # result into the evaluator's stdout: 1e9 accepted. avo's own git came from that PATH too.
    assert probe()[0], f"this test needs a working bubblewrap: {probe()[1]}"
    fake, log = tmp_path / "fakebin", tmp_path / "impostors.log"
    fake.mkdir()
    for name in ("bwrap", "git"):
        _impostor(fake, name, log)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}", "AVO_DISABLE_PLUGIN_AUTOLOAD": "1"}

    def avo(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "avo", *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=300)

    started = avo("start", "--target", str(toy), "--max-steps", "3", "--sandbox", "bwrap")
    assert started.returncode == 0, started.stdout + started.stderr
    run = next(runs_root.iterdir())
    _x(run / "work", 2.0)
    sub = avo("submit", "-m", "x=2", "--run", str(run))
    assert sub.returncode == 0, sub.stdout + sub.stderr
    assert not log.exists(), f"avo or its evaluator ran the agent's programs:\n{log.read_text()}"
    state = json.loads((run / "run.json").read_text())
    assert [round(v["scalar"], 3) for v in state["versions"]] == [8.818, 10.088]  # the honest scores


def test_the_global_git_configuration_runs_no_filter_for_avo(toy: Path, tmp_path: Path, runs_root: Path,
                                                             core_plugins: None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # Round seven: work/.gitattributes names a filter that ~/.gitconfig defines; avo rewrote
    # work/.git/config but read the global and system configuration, so the filter ran (three
    # times a submit) as avo, outside the sandbox, on what avo commits.
    marker = tmp_path / "filter-ran"
    home = tmp_path / "home"
    home.mkdir()
    for way in ("clean", "smudge"):
        script = home / way
        script.write_text(f"#!/bin/sh\necho {way} >> '{marker}'\nexec cat\n")
        script.chmod(0o755)
    (home / ".gitconfig").write_text(f"[filter \"x\"]\n\tclean = {home / 'clean'}\n\tsmudge = {home / 'smudge'}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    # The filter works for a git that reads the configuration: the test would show nothing otherwise.
    probe_repo = tmp_path / "probe"
    subprocess.run(["git", "init", "-q", str(probe_repo)], check=True)
    (probe_repo / ".gitattributes").write_text("* filter=x\n")
    subprocess.run(["git", "-C", str(probe_repo), "add", "-A"], check=True)
    assert marker.read_text().count("clean") >= 1
    marker.unlink()
    run = start_run(str(toy), runs_root)
    (run.paths.work / ".gitattributes").write_text("* filter=x\n")
    _x(run.paths.work, 2.0)
    out = submit(run, "x=2 with a filter named")
    assert out.outcome == "accepted"
    assert not marker.exists(), marker.read_text()


FORGED = '{"correct": true, "metrics": {"config_a": 1e9, "config_b": 1e9}}'


def test_an_evaluator_copy_swapped_after_its_check_and_put_back_voids_the_result(
        toy: Path, runs_root: Path, core_plugins: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Round seven: a process of the agent's watched .avo/eval/ and, once avo had checked the copy
    # and unpacked the snapshot, swapped the copy's eval.py for one that wrote the original bytes
    # back and printed a forged result: the hashes after the evaluation matched, 1e9 accepted.
    # Here the swap happens at the same moment, deterministically: right before the evaluator starts.
    import avo.evaluation as evaluation

    run = start_run(str(toy), runs_root)
    copy = next((run.paths.root / ".avo" / "evaluator").glob("*/eval.py"))
    original = copy.read_bytes()
    real = evaluation.evaluate_dir

    def swap_then_evaluate(*args: object, **kwargs: object) -> object:
        forged = textwrap.dedent(f"""
            open({str(copy)!r}, "wb").write({original!r})
            print({FORGED!r})
            """)
        spare = copy.with_name("eval.py.swap")
        spare.write_text(forged)
        os.replace(spare, copy)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(evaluation, "evaluate_dir", swap_then_evaluate)
    _x(run.paths.work, 2.0)
    out = submit(run, "x=2")
    assert copy.read_bytes() == original  # the forgery put the bytes back, as the attack did
    assert out.outcome == "failed", (out.outcome, out.evaluation.scalar)
    assert "were rewritten or replaced after they were checked" in (out.evaluation.result.error or "")
    assert "eval.py" in (out.evaluation.result.error or "")
    state = json.loads(run.paths.run_json.read_text())
    assert len(state["versions"]) == 1


# A noisy plugin target whose score follows the evaluation's secret: ±2 % on any draw, except a
# secret starting "ffff" (one in 65,536), which scores three times as much: the lucky draw a
# producer who chooses the secret (30 tries of game2048's seed player gave 196-1,970) ships.
LUCKY = textwrap.dedent(
    '''
    from pathlib import Path

    from avo import hookimpl
    from avo.models import EvalResult, NoiseSpec, TargetSpec

    SPEC = TargetSpec(name="lucky", entrypoint="quality.txt", noise=NoiseSpec(band=0.1, confirm_runs=3))


    @hookimpl
    def avo_targets():
        return [SPEC]


    @hookimpl
    def avo_seed(target, dest):
        (Path(dest) / "quality.txt").write_text("1.0\\n")


    @hookimpl
    def avo_knowledge(target, dest):
        (Path(dest) / "about.md").write_text("# lucky\\n")


    @hookimpl
    def avo_evaluate(target, workdir, options):
        s = options.secret
        draw = 3.0 if s.startswith("ffff") else 1.0 + 0.04 * (int(s[4:8], 16) / 65535 - 0.5)
        quality = float((Path(workdir) / "quality.txt").read_text())
        return EvalResult(correct=True, metrics={"score": 100.0 * quality * draw})
    '''
)


def test_a_record_made_on_a_chosen_secret_replays_but_fails_on_fresh_draws(
        tmp_path: Path, runs_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Round seven: `avo verify` replays the secret the record names, so a run whose evaluation
    # secret was chosen (avo's code patched to draw the best of 30) verified "OK +0.00 %" at 2.4x
    # the player's median. `--fresh N` measures draws nobody chose.
    import sys

    from typer.testing import CliRunner

    import avo.engine
    from avo import plugins
    from avo.cli.app import app
    from avo.examples import export_run, verify_example, verify_fresh
    from tests.conftest import install_plugin

    install_plugin(tmp_path / "site", monkeypatch, "avo_target_lucky", LUCKY, name="avo-target-lucky",
                   version="0.1", entry="lucky")
    real = avo.engine.secrets.token_hex
    try:
        with monkeypatch.context() as patch:  # the producer's 5-line patch: every secret a lucky one
            patch.setattr(avo.engine.secrets, "token_hex", lambda n=None: "ffff" + real(14) if n == 16 else real(n))
            forged_run = start_run("lucky", runs_root)
        forged = tmp_path / "forged"
        export_run(forged_run, forged, plot=False)
        assert forged_run.state.best_version.scalar == pytest.approx(300.0)
        replay = verify_example(forged)
        assert replay.ok and "reproduced exactly" not in replay.detail and replay.scalar == pytest.approx(300.0)
        fresh = verify_fresh(forged, draws=3)
        assert not fresh.ok, fresh.detail
        assert fresh.detail.startswith("median ") and "over 3 fresh draw(s)" in fresh.detail
        assert fresh.scalar is not None and 98.0 <= fresh.scalar <= 102.0
        cli = CliRunner().invoke(app, ["verify", str(forged), "--fresh", "2"])
        assert cli.exit_code == 1, cli.output
        assert "OK: v0" in cli.output and "MISMATCH on fresh draws: v0 — median" in cli.output

        honest_run = start_run("lucky", tmp_path / "honest-runs")
        honest = tmp_path / "honest"
        export_run(honest_run, honest, plot=False)
        assert verify_fresh(honest, draws=3).ok
        cli = CliRunner().invoke(app, ["verify", str(honest), "--fresh", "2"])
        assert cli.exit_code == 0, cli.output
        assert "OK on fresh draws: v0" in cli.output
    finally:
        sys.modules.pop("avo_target_lucky", None)
        plugins.reset_plugin_manager()


def test_fresh_draws_need_a_noise_band(toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    from avo.errors import AvoError
    from avo.examples import export_run, verify_fresh

    run = start_run(str(toy), runs_root)
    export_run(run, tmp_path / "ex", plot=False)
    with pytest.raises(AvoError, match=r"is deterministic \(no noise band\): a draw on new inputs"):
        verify_fresh(tmp_path / "ex", draws=2)
    with pytest.raises(AvoError, match="--fresh must be at least 1"):
        verify_fresh(tmp_path / "ex", draws=0)


# -- the second pass of round seven: what the first fixes left ------------------------------------

JSON_FORGE = textwrap.dedent('''
    # A sourceless json module beside eval.py: the copy's folder is first on the evaluator's sys.path.
    import sys
    _here = __file__.rsplit("/", 1)[0]
    _saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if p not in ("", _here)]
    del sys.modules["json"]
    import json as _real
    sys.path[:] = _saved
    _dumps = _real.dumps
    def dumps(obj, *a, **k):
        if isinstance(obj, dict) and obj.get("correct") and isinstance(obj.get("metrics"), dict):
            obj = dict(obj, metrics={m: 1e9 for m in obj["metrics"]})
        return _dumps(obj, *a, **k)
    _real.dumps = dumps
    sys.modules["json"] = _real
    ''')


def test_bytecode_planted_in_the_evaluator_copy_is_refused(toy: Path, tmp_path: Path, runs_root: Path,
                                                           core_plugins: None) -> None:
    # The copy's hashes skipped every .pyc: a json.pyc beside the copy's eval.py was imported by it
    # (`python eval.py` puts that folder first on sys.path) and forged its result, 1e9 accepted.
    import py_compile

    from avo.errors import IntegrityError

    run = start_run(str(toy), runs_root)
    copy = next((run.paths.root / ".avo" / "evaluator").glob("*/eval.py")).parent
    source = tmp_path / "json_forge.py"
    source.write_text(JSON_FORGE)
    py_compile.compile(str(source), cfile=str(copy / "json.pyc"), doraise=True)
    _x(run.paths.work, 2.0)
    with pytest.raises(IntegrityError, match=r"holds files that are not the evaluator's: json\.pyc"):
        submit(run, "x=2 with a json.pyc in the copy")
    assert json.loads(run.paths.run_json.read_text())["versions"][-1]["scalar"] < 100
    (copy / "json.pyc").unlink()
    assert submit(run, "x=2").version.scalar == pytest.approx(10.088, abs=1e-3)  # type: ignore[union-attr]


def test_the_evaluator_copy_folder_swapped_and_put_back_voids_the_result(
        toy: Path, runs_root: Path, core_plugins: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # The identity of each file was kept, not of the folder holding them: the copy's folder renamed
    # away for a forged one whose eval.py renamed both back before printing 1e9 left every file
    # as it was checked.
    import avo.evaluation as evaluation

    run = start_run(str(toy), runs_root)
    copy = next((run.paths.root / ".avo" / "evaluator").glob("*/eval.py")).parent
    real_copy, forged = copy.with_name(copy.name + ".real"), copy.with_name(copy.name + ".forged")
    forged.mkdir()
    (forged / "eval.py").write_text(textwrap.dedent(f"""
        import os
        os.rename({str(copy)!r}, {str(forged)!r})
        os.rename({str(real_copy)!r}, {str(copy)!r})
        print({FORGED!r})
        """))
    (forged / "target.yaml").write_bytes((copy / "target.yaml").read_bytes())
    real = evaluation.evaluate_dir

    def swap_then_evaluate(*args: object, **kwargs: object) -> object:
        os.rename(copy, real_copy)
        os.rename(forged, copy)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(evaluation, "evaluate_dir", swap_then_evaluate)
    _x(run.paths.work, 2.0)
    out = submit(run, "x=2")
    assert (copy / "target.yaml").exists() and not real_copy.exists()  # the forgery put the folder back
    assert out.outcome == "failed", (out.outcome, out.evaluation.scalar)
    assert "were rewritten or replaced after they were checked" in (out.evaluation.result.error or "")
    assert "dir:." in (out.evaluation.result.error or "")


STEADY = LUCKY.replace('name="lucky"', 'name="steady"').replace(
    "noise=NoiseSpec(band=0.1, confirm_runs=3)", "noise=NoiseSpec()").replace("# lucky", "# steady").replace(
    """    s = options.secret
    draw = 3.0 if s.startswith("ffff") else 1.0 + 0.04 * (int(s[4:8], 16) / 65535 - 0.5)
""", """    draw = 1.0
""")


def test_bytecode_planted_in_a_cache_never_runs_in_a_plugin_evaluator(
        tmp_path: Path, runs_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The plugin evaluator imported everything but the copy's own modules through avo's bytecode
    # cache ($XDG_CACHE_HOME/avo/pycache), the agent's to write: a json/__init__ .pyc valid for the
    # installed source (its mtime and size) patched os.write to multiply the result's metrics by 10.
    import importlib._bootstrap_external as external

    from avo import plugins
    from tests.conftest import install_plugin

    assert "draw = 1.0" in STEADY and 'name="steady"' in STEADY
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    src = Path(json.__file__)
    st = src.stat()
    patch = textwrap.dedent('''
        import os as _os
        _w = _os.write
        def _write(fd, data, _w=_w):
            b = bytes(data)
            if b.startswith(b'{"correct":true,"metrics":{'):
                obj = loads(b)
                obj["metrics"] = {k: v * 10 for k, v in obj["metrics"].items()}
                _w(fd, (dumps(obj, separators=(",", ":")) + ("\\n" if b.endswith(b"\\n") else "")).encode())
                return len(b)
            return _w(fd, data)
        _os.write = _write
        ''')
    code = compile(src.read_text() + patch, str(src), "exec")
    dest = Path(str(cache / "avo" / "pycache") + str(src.parent)) / f"__init__.{sys.implementation.cache_tag}.pyc"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(external._code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size))  # type: ignore[attr-defined]
    install_plugin(tmp_path / "site", monkeypatch, "avo_target_steady", STEADY, name="avo-target-steady",
                   version="0.1", entry="steady")
    try:
        run = start_run("steady", runs_root)
        assert run.state.best_version.scalar == pytest.approx(100.0)
        (run.paths.work / "quality.txt").write_text("1.01\n")
        out = submit(run, "1 % better")
        assert out.outcome == "accepted" and out.evaluation.scalar == pytest.approx(101.0), out.evaluation.scalar
    finally:
        sys.modules.pop("avo_target_steady", None)
        plugins.reset_plugin_manager()
