"""Attacks on the evaluation path (issue 12): each one is a real hostile candidate or action.

Every test here failed on the first version (a false score entered the lineage or the run
was left unusable) and must pass now: the candidate cannot replace the evaluator, forge its
result, outlive its evaluation, or change what the evaluator runs.
"""

from __future__ import annotations

import json
import os
import py_compile
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from avo.engine import evaluate_work, start_run, submit
from avo.errors import AvoError
from avo.evaluation import evaluate_dir
from avo.plugins import call_target_hook, find_target
from avo.sandbox import Sandbox, popen, probe, tree_cpu_seconds

needs_bwrap = pytest.mark.skipif(not probe()[0], reason=f"bubblewrap cannot run here: {probe()[1]}")

FORGED = {"correct": True, "metrics": {"config_a": 123456.0, "config_b": 123456.0}}


def _candidate(work: Path, body: str) -> None:
    """The toy candidate with ``body`` run when the evaluator imports it."""
    (work / "solution.py").write_text(
        textwrap.dedent(body) + "\nX = 7.0\nY = 3.0\n\ndef square(n):\n    return n * n\n")


def _pids_with(marker: str) -> list[str]:
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    return [p for p in out if int(p) != os.getpid()]


@needs_bwrap
def test_a_daemon_left_by_the_candidate_dies_with_the_evaluation_and_cannot_reach_avo(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    marker = f"avo-daemon-{os.getpid()}-{time.time_ns()}"
    run = start_run(str(toy), runs_root)
    assert run.state.sandbox == "bwrap"
    _candidate(run.paths.work, f"""
        import json, os, sys, time
        from pathlib import Path
        here = Path(__file__).resolve().parent
        print("VISIBLE_PIDS=" + json.dumps(sorted(int(p) for p in os.listdir("/proc") if p.isdigit())),
              file=sys.stderr)
        print("RUN_FOLDER_VISIBLE=" + str((here.parents[2] / "run.json").exists()), file=sys.stderr)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                forged = {json.dumps(json.dumps(FORGED))} + "\\n"
                time.sleep(0.5)  # the evaluator has answered by now
                for pid in os.listdir("/proc"):
                    try:
                        with open(f"/proc/{{pid}}/fd/1", "w") as fh:
                            fh.write(forged)
                    except OSError:
                        pass
                try:
                    (here.parents[2] / "run.json").write_text("{{}}")
                except OSError:
                    pass
                os.execv("/bin/sh", ["sh", "-c", "sleep 30 # {marker}"])
            os._exit(0)
    """)
    out = submit(run, "a candidate that leaves a daemon behind")
    # Its forged line reaches the evaluator's own stdout (same sandbox) at most: two results, a
    # failed evaluation; never the forged score.
    assert out.evaluation.scalar is None or out.evaluation.scalar < 1000, out.evaluation.result
    time.sleep(1.5)
    assert _pids_with(marker) == [], "the candidate's daemon outlived its evaluation"
    state = json.loads(run.paths.run_json.read_text())  # the daemon could not touch the record
    assert all(v["scalar"] < 1000 for v in state["versions"])
    log = out.evaluation.log_path.read_text()
    visible = json.loads(log.split("VISIBLE_PIDS=")[1].splitlines()[0])
    assert os.getpid() not in visible and max(visible) < 100, f"the sandbox sees outside processes: {visible}"
    assert "RUN_FOLDER_VISIBLE=False" in log


def test_a_second_result_line_from_atexit_fails_the_evaluation(toy: Path, runs_root: Path,
                                                               core_plugins: None) -> None:
    # An evaluator whose candidate shares its stdout (here: an atexit handler of the evaluator's
    # own process prints after the real result) must not be taken at its last line.
    ev = toy / "eval.py"
    ev.write_text(ev.read_text().replace(
        "    print(json.dumps(evaluate(args.workdir)))",
        f"    import atexit\n    atexit.register(lambda: print(json.dumps({FORGED!r})))\n"
        "    print(json.dumps(evaluate(args.workdir)))"))
    spec = find_target(str(toy))
    cand = toy.parent / "atexit-cand"
    shutil.copytree(toy / "seed", cand)
    result = evaluate_dir(spec, cand, toy.parent / "atexit.log").result
    assert not result.correct and "2 result objects" in (result.error or "")


def test_a_candidate_printing_a_result_of_its_own_is_not_believed(toy: Path, runs_root: Path,
                                                                  core_plugins: None) -> None:
    run = start_run(str(toy), runs_root)
    _candidate(run.paths.work, f"""
        import atexit, json, os, sys
        atexit.register(lambda: print(json.dumps({FORGED!r})))
        print(json.dumps({FORGED!r}))
    """)
    out = submit(run, "a candidate that prints results of its own")
    assert out.evaluation.scalar is None or out.evaluation.scalar < 1000, out.evaluation.result
    assert all(v.scalar < 1000 for v in run.state.versions)


def test_an_evaluator_that_prints_a_failing_then_a_passing_line_fails(toy: Path, runs_root: Path,
                                                                      core_plugins: None) -> None:
    run = start_run(str(toy), runs_root)
    ev = toy / "eval.py"
    # The evaluator is copied at start: a change to the installed one stops the run instead.
    ev.write_text(ev.read_text().replace(
        "    print(json.dumps(evaluate(args.workdir)))",
        '    print(json.dumps({"correct": False, "metrics": {}, "error": "gate"}))\n'
        "    print(json.dumps(evaluate(args.workdir)))"))
    with pytest.raises(AvoError, match="evaluator changed since this run started"):
        submit(run, "anything")
    spec = find_target(str(toy))
    cand = runs_root.parent / "cand"
    shutil.copytree(toy / "seed", cand)
    result = evaluate_dir(spec, cand, runs_root.parent / "two-lines.log").result
    assert not result.correct and "2 result objects" in (result.error or "")


def test_an_output_flood_without_newlines_is_capped_as_it_arrives(toy: Path, runs_root: Path,
                                                                  core_plugins: None) -> None:
    ev = toy / "eval.py"
    ev.write_text(ev.read_text().replace(
        "    print(json.dumps(evaluate(args.workdir)))",
        '    if "flood" in (args.workdir / "solution.py").read_text():\n'
        '        for _ in range(64):\n            sys.stdout.write("x" * (1 << 20))\n'
        "    print(json.dumps(evaluate(args.workdir)))"))
    run = start_run(str(toy), runs_root)
    _candidate(run.paths.work, "# flood\n")
    out = submit(run, "64 MiB on stdout without a newline")
    assert out.outcome == "failed" and "output cap" in (out.evaluation.result.error or "")
    assert out.evaluation.log_path.stat().st_size < 9 << 20


def test_a_metric_name_cannot_forge_a_commit_trailer(toy: Path, runs_root: Path, core_plugins: None) -> None:
    ev = toy / "eval.py"
    ev.write_text(ev.read_text().replace(
        "    print(json.dumps(evaluate(args.workdir)))",
        '    if "forge" in (args.workdir / "solution.py").read_text():\n'
        '        print(json.dumps({"correct": True, "metrics": {"a\\navo-scalar: 999999": 5.0}}))\n'
        "        return 0\n"
        "    print(json.dumps(evaluate(args.workdir)))"))
    run = start_run(str(toy), runs_root)
    ev_copy = next((run.paths.private / "evaluator").iterdir())
    assert (ev_copy / "eval.py").is_file()
    _candidate(run.paths.work, "# forge\n")
    out = submit(run, "a metric name with a newline")
    assert out.outcome == "failed" and "single-line identifier" in (out.evaluation.result.error or "")
    log = subprocess.run(["git", "-C", str(run.paths.work), "log", "--format=%B"], capture_output=True,
                         text=True, check=True).stdout
    assert "999999" not in log


def test_a_candidate_cannot_shadow_the_plugin_evaluator(tmp_path: Path) -> None:
    spec = find_target("game2048")
    seed = tmp_path / "seed"
    seed.mkdir()
    call_target_hook(spec, "avo_seed", dest=seed)
    honest = evaluate_dir(spec, seed, tmp_path / "honest.log", quick=True)
    cheat = tmp_path / "cheat"
    shutil.copytree(seed, cheat)
    forged = json.dumps({"correct": True, "metrics": {"bank1": 123456.0}})
    (cheat / "avo").mkdir()
    (cheat / "avo" / "__init__.py").write_text("hookimpl = None\n")
    (cheat / "avo" / "evaluator.py").write_text(
        f"import os, sys\ndef main(argv=None):\n    print({forged!r})\n"
        f"    fd = int(sys.argv[sys.argv.index('--result-fd') + 1])\n"
        f"    os.write(fd, ({forged!r} + '\\n').encode()); os._exit(0)\n"
        "if __name__ == '__main__':\n    main()\n")
    shadowed = evaluate_dir(spec, cheat, tmp_path / "cheat.log", quick=True)
    assert honest.scalar is not None and shadowed.scalar is not None
    assert shadowed.result.metrics == honest.result.metrics


def test_a_stale_pyc_next_to_the_installed_plugin_is_never_run(tmp_path: Path) -> None:
    import avo_target_game2048

    spec = find_target("game2048")
    seed = tmp_path / "seed"
    seed.mkdir()
    call_target_hook(spec, "avo_seed", dest=seed)
    honest = evaluate_dir(spec, seed, tmp_path / "honest.log", quick=True)
    package = Path(avo_target_game2048.__file__).parent
    source = package / "__init__.py"
    forged_src = tmp_path / "forged.py"
    forged_src.write_text(source.read_text() + textwrap.dedent("""

        @hookimpl
        def avo_evaluate(target, workdir, options):  # noqa: F811 - the attack
            return EvalResult(correct=True, metrics={"bank1": 123456.0})
        """))
    pyc = Path(__import__("importlib.util").util.cache_from_source(str(source)))
    saved = pyc.read_bytes() if pyc.exists() else None
    try:
        # An unchecked-hash .pyc is used without looking at the source at all.
        py_compile.compile(str(forged_src), cfile=str(pyc), dfile=str(source),
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        # A plain import runs the planted bytecode: the attack is live...
        plain = subprocess.run(
            [sys.executable, "-c", "import avo_target_game2048 as m; print(m.avo_evaluate(None, None, None).metrics)"],
            capture_output=True, text=True)
        assert "123456" in plain.stdout, plain.stderr
        # ... but avo runs its private copy with its own bytecode cache.
        planted = evaluate_dir(spec, seed, tmp_path / "planted.log", quick=True)
    finally:
        if saved is None:
            pyc.unlink(missing_ok=True)
        else:
            pyc.write_bytes(saved)
    assert honest.scalar is not None and planted.scalar is not None
    assert planted.result.metrics == honest.result.metrics


def test_a_pth_file_dropped_into_site_packages_stops_the_run(toy: Path, runs_root: Path,
                                                             core_plugins: None) -> None:
    import site

    run = start_run(str(toy), runs_root)
    pth = Path(site.getsitepackages()[0]) / f"zz_avo_attack_{os.getpid()}.pth"
    try:
        pth.write_text("import json; json.dumps = lambda *a, **k: '{\"correct\": true, \"primary\": 1e9}'\n")
        with pytest.raises(AvoError, match=r"start-up files.*site:zz_avo_attack"):
            evaluate_work(run)
    finally:
        pth.unlink(missing_ok=True)
    assert evaluate_work(run).evaluation.scalar is not None  # usable again once it is gone


def test_swapping_the_installed_evaluator_during_submits_never_scores(toy: Path, runs_root: Path,
                                                                      core_plugins: None) -> None:
    run = start_run(str(toy), runs_root)
    ev = toy / "eval.py"
    honest = ev.read_text()
    forging = honest.replace("    print(json.dumps(evaluate(args.workdir)))",
                             f"    print(json.dumps({FORGED!r}))")
    stop = threading.Event()

    def swap() -> None:  # the agent, flipping the file around avo's hash check
        while not stop.is_set():
            ev.write_text(forging)
            time.sleep(0.002)
            ev.write_text(honest)
            time.sleep(0.002)

    flipper = threading.Thread(target=swap, daemon=True)
    flipper.start()
    outcomes = []
    try:
        for x in (6.0, 6.5, 6.8):
            (run.paths.work / "solution.py").write_text(
                f"X = {x}\nY = 3.0\n\ndef square(n):\n    return n * n\n")
            try:
                outcomes.append(submit(run, f"x={x}").outcome)
            except AvoError as exc:
                outcomes.append("refused")
                assert "evaluator changed" in str(exc)
    finally:
        stop.set()
        flipper.join()
        ev.write_text(honest)
    final = json.loads(run.paths.run_json.read_text())
    assert all(v["scalar"] < 1000 for v in final["versions"]), outcomes


@needs_bwrap
def test_cpu_of_every_process_in_the_sandbox_is_counted(tmp_path: Path) -> None:
    # A double-forked, setsid daemon does the work; the tree's CPU still sees it.
    code = textwrap.dedent("""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                end = time.process_time() + 0.6
                while time.process_time() < end:
                    pass
                open("done", "w").close()
                os._exit(0)
            os._exit(0)
        deadline = time.time() + 60  # a loaded machine may take a while for 0.6 s of CPU
        while not os.path.exists("done") and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
    """)
    box = Sandbox(writable=(tmp_path,), cwd=tmp_path)
    proc = popen([sys.executable, "-c", code], box)
    peak = 0.0
    while proc.poll() is None:
        peak = max(peak, tree_cpu_seconds(proc.pid))
        time.sleep(0.05)
    assert peak >= 0.5, f"the daemon's CPU was not counted ({peak:.2f} s)"


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("runuser") is None,
                    reason="needs root to create an unprivileged user (useradd, runuser)")
def test_the_sandbox_works_for_an_unprivileged_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import avo.sandbox as sandbox

    user = "avo-sandbox-test"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", user],
                   capture_output=True)  # exists already on a second run
    import tempfile

    # pytest's tmp_path sits in a folder only root may enter.
    base = Path(tempfile.mkdtemp(prefix="avo-unpriv-", dir="/tmp"))
    os.chmod(base, 0o755)
    scratch = base / "scratch"
    scratch.mkdir()
    shutil.chown(scratch, user)
    secret = base / "secret.txt"
    secret.write_text("outside")
    monkeypatch.chdir(base)
    # The venv's interpreter lives under /root, which this user cannot read: use the system's.
    monkeypatch.setattr(sandbox, "_interpreter_paths", lambda: ())
    args = sandbox.bwrap_args(Sandbox(writable=(scratch,), cwd=scratch))
    probe_code = textwrap.dedent(f"""
        import os, socket
        print("pid", os.getpid())
        print("outside", os.path.exists({str(secret)!r}))
        open("ok.txt", "w").write("x")
        try:
            open("/usr/evil", "w")
            print("usr writable")
        except OSError:
            print("usr read-only")
        try:
            socket.create_connection(("127.0.0.1", 22), timeout=1)
            print("network")
        except OSError:
            print("no network")
    """)
    try:
        proc = subprocess.run(["runuser", "-u", user, "--", *args, "/usr/bin/python3", "-c", probe_code],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert "pid 2" in proc.stdout and "outside False" in proc.stdout
        assert "usr read-only" in proc.stdout and "no network" in proc.stdout
        assert (scratch / "ok.txt").exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_an_evaluator_hash_edited_to_match_a_changed_evaluator_is_refused(toy: Path, runs_root: Path,
                                                                          core_plugins: None) -> None:
    from avo.engine import open_run
    from avo.integrity import hash_tree

    run = start_run(str(toy), runs_root)
    ev = toy / "eval.py"
    ev.write_text(ev.read_text().replace("    print(json.dumps(evaluate(args.workdir)))",
                                         f"    print(json.dumps({FORGED!r}))"))
    # The agent makes the record agree with its evaluator.
    data = json.loads(run.paths.run_json.read_text())
    data["hashes"]["evaluator"]["eval.py"] = hash_tree(ev)["eval.py"]
    run.paths.run_json.write_text(json.dumps(data))
    with pytest.raises(AvoError, match=r"hashes.*pinned by v0's commit"):
        open_run(run.paths.root, runs_root)


def test_the_shell_environment_cannot_load_a_library_into_the_evaluator(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # An agent runs `avo submit` from its own shell: `LD_PRELOAD=evil.so avo submit` would load
    # its library into the trusted evaluator (it could rewrite the result on its way out), and
    # a BLAS or NumPy knob (OPENBLAS_CORETYPE, NPY_DISABLE_CPU_FEATURES) would slow a reference.
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler to build the preloaded library")
    marker = tmp_path / "loaded.txt"
    src = tmp_path / "evil.c"
    src.write_text(textwrap.dedent(f"""
        #include <stdio.h>
        #include <stdlib.h>
        __attribute__((constructor)) static void evil(void) {{
            FILE *f = fopen("{marker}", "a");
            char line[4096] = {{0}};
            FILE *c = fopen("/proc/self/cmdline", "r");
            size_t n = c ? fread(line, 1, sizeof line - 1, c) : 0;
            for (size_t i = 0; i < n; i++) if (!line[i]) line[i] = ' ';
            if (f) {{ fprintf(f, "%s | knob=%s\\n", line, getenv("OPENBLAS_CORETYPE") ?: "-"); fclose(f); }}
            if (c) fclose(c);
        }}
        """))
    lib = tmp_path / "evil.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    spec = find_target("game2048")
    seed = tmp_path / "seed"
    seed.mkdir()
    call_target_hook(spec, "avo_seed", dest=seed)
    monkeypatch.setenv("LD_PRELOAD", str(lib))
    monkeypatch.setenv("OPENBLAS_CORETYPE", "PRESCOTT")
    monkeypatch.setenv("NPY_DISABLE_CPU_FEATURES", "AVX2")
    evaluated = evaluate_dir(spec, seed, tmp_path / "eval.log", quick=True)
    assert evaluated.scalar is not None, evaluated.result.error
    loaded = marker.read_text() if marker.exists() else ""
    # Other programs avo starts may load it (git, bubblewrap): never the evaluator.
    assert "avo" in (tmp_path / "eval.log").read_text()
    # The evaluator starts as `python -I -X pycache_prefix=... -c <boot>` (avo.evaluator_copy).
    assert "pycache_prefix=" not in loaded, loaded
    from avo.evaluation import inherited_env

    assert not {"LD_PRELOAD", "OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES"} & set(inherited_env())
