"""Held-out red team (after issues 12 and 13): attacks the project had not tried.

Each test is a real hostile candidate (run through the real bubblewrap sandbox and the real
evaluator) or a real hostile agent action. A test that fails names a hole that is still
open; docs/SECURITY.md and the red-team report say what the fix is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from avo.engine import evaluate_work, start_run, submit
from avo.eval_inputs import candidate_digest, derived_seed
from avo.models import EvalOptions
from avo.sandbox import CpuMeter, Sandbox, popen, probe, tasks_created, tree_cpu_seconds

needs_bwrap = pytest.mark.skipif(not probe()[0], reason=f"bubblewrap cannot run here: {probe()[1]}")


def _run_boxed(code: str, box: Sandbox) -> subprocess.CompletedProcess[str]:
    proc = popen([sys.executable, "-c", textwrap.dedent(code)], box, level="bwrap",
                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


@needs_bwrap
def test_a_sandboxed_candidate_cannot_write_kernel_sysctls(tmp_path: Path) -> None:
    # When avo runs as root, bwrap makes no user namespace: the candidate is real uid 0
    # without capabilities, and /proc/sys in its fresh /proc was left writable. A write to
    # /proc/sys/kernel/core_pattern ("|/path/in/the/snapshot") makes the kernel run a program
    # of the candidate's as root outside every namespace at the next crash; pid_max or
    # file-max take the machine down. Here: rewrite a harmless global sysctl with its own value.
    out = _run_boxed("""
        path = "/proc/sys/fs/pipe-max-size"
        value = open(path).read()
        try:
            with open(path, "w") as fh:
                fh.write(value)
            print("WROTE", path)
        except OSError as exc:
            print("REFUSED", exc)
    """, Sandbox(writable=(tmp_path,), cwd=tmp_path))
    assert "REFUSED" in out.stdout, f"a sandboxed candidate changed a kernel setting: {out.stdout}"


@needs_bwrap
def test_a_directory_candidate_cannot_print_the_result_and_exit_before_its_evaluator(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # The toy evaluator imports the candidate in its own process and the result is its last
    # stdout line: a candidate that prints one result object and ends the process first is
    # the only result there is. 1e6 was accepted by `avo-eval` and `avo submit`.
    run = start_run(str(toy), runs_root)
    (run.paths.work / "solution.py").write_text(textwrap.dedent("""
        import json, os, sys
        X, Y = 0.0, 0.0
        def square(n):
            return n * n
        print(json.dumps({"correct": True, "metrics": {"config_a": 1e6, "config_b": 1e6}}))
        sys.stdout.flush()
        os._exit(0)
    """))
    out = submit(run, "a candidate that answers for its evaluator")
    assert out.outcome != "accepted", f"a forged result was accepted: {out.evaluation.result}"
    assert all(v.scalar < 1000 for v in run.state.versions)


def test_the_digest_sees_where_a_directory_link_points(tmp_path: Path) -> None:
    # os.walk lists a link to a directory among the folders and does not descend: neither
    # the link nor its target was hashed, so `tables -> a` and `tables -> b` (both inside
    # the tree, so the export accepts them) replay the same inputs with different code.
    work = tmp_path / "work"
    for name, value in (("a", "1"), ("b", "2")):
        (work / name).mkdir(parents=True)
        (work / name / "table.py").write_text(f"ANSWER = {value}\n")
    (work / "agent.py").write_text("from tables.table import ANSWER\n")
    (work / "tables").symlink_to("a")
    first = candidate_digest(work)
    (work / "tables").unlink()
    (work / "tables").symlink_to("b")
    assert candidate_digest(work) != first, "the candidate changed what it runs without changing its inputs"


@needs_bwrap
def test_files_under_work_avo_are_not_a_side_channel_past_the_digest(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # The digest leaves `.avo/` out (avo's score file), but the snapshot the candidate runs
    # from holds every file the agent put in work/.avo/. So the agent can change what the
    # candidate does (answers for the inputs it logged last time) and keep its inputs.
    run = start_run(str(toy), runs_root)
    work = run.paths.work
    (work / "solution.py").write_text(textwrap.dedent("""
        import json
        from pathlib import Path
        try:
            X = float(json.loads((Path(__file__).parent / ".avo" / "answers.json").read_text())["x"])
        except (OSError, ValueError, KeyError):
            X = 1.0
        Y = 3.0
        def square(n):
            return n * n
    """))
    def snapshot_digest(name: str) -> str:  # the digest of what is evaluated (no .git)
        dest = runs_root.parent / name
        run.lineage.export(run.lineage.snapshot_tree(), dest)
        return candidate_digest(dest)

    (work / ".avo" / "answers.json").write_text('{"x": 1.0}')
    before, digest_before = evaluate_work(run).evaluation.scalar, snapshot_digest("snap1")
    (work / ".avo" / "answers.json").write_text('{"x": 7.0}')
    after, digest_after = evaluate_work(run).evaluation.scalar, snapshot_digest("snap2")
    assert digest_after == digest_before  # what the target derives its inputs from
    assert after == before, (f"the candidate's score moved from {before} to {after} through a file "
                             "its digest does not cover")


@needs_bwrap
def test_cpu_of_children_reaped_automatically_is_counted(tmp_path: Path) -> None:
    # With SIGCHLD ignored, the kernel reaps children itself and adds their CPU to nobody's
    # cutime: a worker that forks a helper per call and lets it exit hides the helper's CPU
    # from tree_cpu_seconds (timing targets compare whole-sandbox CPU).
    code = """
        import os, signal, time
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        pid = os.fork()
        if pid == 0:
            end = time.process_time() + 0.8
            while time.process_time() < end:
                pass
            os._exit(0)
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.02)
        time.sleep(0.5)
    """
    proc = popen([sys.executable, "-c", textwrap.dedent(code)], Sandbox(writable=(tmp_path,), cwd=tmp_path),
                 level="bwrap")
    meter, live = CpuMeter(proc.pid), 0.0
    while proc.poll() is None:
        meter.sample()
        live = tree_cpu_seconds(proc.pid) or live
        time.sleep(0.05)
    assert meter.seconds() >= 0.6, (f"0.8 s of a helper's CPU disappeared: the meter counted {meter.seconds():.2f} s "
                                    f"(the live tree {live:.2f} s)")
    assert meter.seconds() < live + 1.2, "the meter counted the helper's CPU more than once"


@needs_bwrap
def test_a_child_reaped_by_the_kernel_between_two_looks_is_counted_as_a_task(tmp_path: Path) -> None:
    # A helper that lives less than any sampling period is never seen by CpuMeter: the
    # sandbox's PID namespace still numbered it, and tasks_created says so.
    ready, go = tmp_path / "ready", tmp_path / "go"
    code = f"""
        import os, signal, time
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        open({str(ready)!r}, "w").close()
        while not os.path.exists({str(go)!r}):
            time.sleep(0.01)
        for _ in range(3):
            if os.fork() == 0:
                os._exit(0)
        time.sleep(0.3)
        open({str(ready)!r} + "2", "w").close()
        time.sleep(30)
    """
    proc = popen([sys.executable, "-c", textwrap.dedent(code)], Sandbox(writable=(tmp_path,), cwd=tmp_path),
                 level="bwrap")
    try:
        while not ready.exists():
            assert proc.poll() is None, "the sandboxed script ended early"
            time.sleep(0.02)
        before = tasks_created(proc.pid)
        assert before is not None, "tasks_created cannot read the sandbox's PID namespace"
        assert tasks_created(proc.pid) == before, "reading the count changed it"
        go.touch()
        while not Path(str(ready) + "2").exists():
            time.sleep(0.02)
        after = tasks_created(proc.pid)
        assert after == before + 3, f"3 helpers reaped by the kernel counted as {after - before} new task(s)"
    finally:
        proc.kill()
        proc.wait()


@needs_bwrap
def test_the_agent_cannot_learn_the_inputs_a_candidate_will_get(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    # The agent runs as the same user: it reads the run's secret from run.json (and the
    # trajectory's start record), writes it into its candidate, and the candidate, inside
    # the sandbox, hashes its own snapshot and derives the very seeds the evaluator will use
    # (the formulas are public: avo.eval_inputs and the target's source). With those, an
    # attention kernel precomputes its outputs before the timed calls and a player knows
    # every spawn: "no edited tree can be written against its own inputs" does not hold.
    run = start_run(str(toy), runs_root)
    secret = json.loads(run.paths.run_json.read_text()).get("eval_secret")
    assert not secret, "the evaluation secret is readable by the agent in run.json"
    start = json.loads(run.paths.trajectory.read_text().splitlines()[0])
    assert "eval_secret" not in json.dumps(start), "the evaluation secret is in the trajectory"


def test_derived_seeds_replayed_inside_the_sandbox_match_the_evaluator(tmp_path: Path) -> None:
    # The mechanics of the attack above, end to end: a candidate given the secret computes
    # its evaluator's seed from inside the sandbox (here at level bwrap when available).
    work = tmp_path / "cand"
    work.mkdir()
    secret = "0123456789abcdef0123456789abcdef"
    (work / "agent.py").write_text(textwrap.dedent(f"""
        import hashlib, os
        from pathlib import Path
        SECRET = {secret!r}

        def digest(root):
            h = hashlib.sha256()
            for folder, dirs, files in os.walk(root):
                here = Path(folder)
                dirs[:] = sorted(d for d in dirs if not (here == root and d == ".avo"))
                for name in sorted(files):
                    path = here / name
                    rel = path.relative_to(root).as_posix()
                    data = path.read_bytes()
                    mode = "x" if os.access(path, os.X_OK) else "f"
                    h.update(f"{{rel}}\\0{{mode}}\\0{{len(data)}}\\0".encode())
                    h.update(data)
            return h.hexdigest()

        if __name__ == "__main__":
            raw = hashlib.sha256(f"{{SECRET}}\\0{{digest(Path.cwd())}}\\0bank1".encode()).digest()
            print(int.from_bytes(raw[:8], "big") >> 1)
    """))
    expected = derived_seed(EvalOptions(secret=secret), work, "bank1")
    level = "bwrap" if probe()[0] else "none"
    proc = popen([sys.executable, "-S", "agent.py"], Sandbox(writable=(work,), cwd=work), level=level,
                 stdout=subprocess.PIPE, text=True)
    predicted = int(proc.communicate(timeout=60)[0].strip())
    # Passing half of the attack: with the secret in hand the prediction is exact.
    assert predicted == expected
    # The hole is that the agent has it: see test_the_agent_cannot_learn_the_inputs_a_candidate_will_get.
    assert os.environ.get("AVO_EVAL_SECRET") is None


@needs_bwrap
def test_a_candidate_cannot_fill_memory_through_the_sandboxs_tmp(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # The sandbox's /tmp and /dev/shm are tmpfs: what a candidate writes there is RAM that
    # no RLIMIT_AS counts. With a 512 MiB address-space limit a candidate held 1 GiB in
    # /tmp and passed; a real one fills half the machine's memory per sandbox.
    target = toy / "target.yaml"
    text = target.read_text().replace("  timeout: 60s\n\nbaselines", "  timeout: 60s\n  limits:\n    address_space_mb: 512\n\nbaselines")
    assert "address_space_mb" in text
    target.write_text(text)
    run = start_run(str(toy), runs_root)
    (run.paths.work / "solution.py").write_text(textwrap.dedent("""
        chunk = b"x" * (1 << 20)
        held = 0
        try:
            with open("/tmp/ballast", "wb") as fh:
                for _ in range(1024):
                    fh.write(chunk)
                    held += 1
        except OSError:
            pass
        import sys
        print("HELD_MIB", held, file=sys.stderr)  # the toy evaluator keeps its candidate's stdout
        X, Y = 7.0, 3.0
        def square(n):
            return n * n
    """))
    ev = evaluate_work(run).evaluation
    log = ev.log_path.read_text()
    held = int(log.split("HELD_MIB", 1)[1].split()[0]) if "HELD_MIB" in log else 0
    assert held <= 512, f"the candidate held {held} MiB in the sandbox's /tmp under a 512 MiB memory limit"


@needs_bwrap
def test_a_candidate_cannot_hold_memory_past_its_limit_in_the_sandboxs_root_or_dev(tmp_path: Path) -> None:
    # Besides /tmp: the sandbox's / and /dev are writable tmpfs too, and a memfd's pages are
    # RAM that RLIMIT_AS does not see (write(), never mapped). Only a memory cgroup bounds it.
    code = """
        import json, os, resource
        resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))
        chunk = b"x" * (1 << 20)
        held = {}
        # A memfd written with write() is RAM that only a memory cgroup bounds (none for an
        # unprivileged user here): docs/SECURITY.md lists it as open. The tmpfs mounts are bounded.
        for name in ("/ballast", "/dev/ballast"):
            held[name] = 0
            try:
                fd = os.memfd_create("ballast") if name == "memfd" else os.open(name, os.O_CREAT | os.O_WRONLY)
                for _ in range(600):
                    os.write(fd, chunk)
                    held[name] += 1
                os.close(fd)  # a memfd's pages go with its last descriptor
            except OSError:
                pass
            if name != "memfd":
                try:
                    os.unlink(name)
                except OSError:
                    pass
        print("HELD", json.dumps(held))
    """
    out = _run_boxed(code, Sandbox(writable=(tmp_path,), cwd=tmp_path)).stdout
    held = json.loads(out.split("HELD", 1)[1]) if "HELD" in out else {}
    over = {k: v for k, v in held.items() if v > 512}
    assert not over, f"MiB held past a 512 MiB address-space limit: {over}"


def test_a_file_named_dot_avo_in_work_fails_the_submit_with_a_named_error(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # A candidate file where avo keeps its score file: the evaluation passed, the commit was
    # made, then writing work/.avo/scores.jsonl raised "File exists" (a raw OSError) and was
    # undone; every later submit did the same, and `avo recover` could not help.
    run = start_run(str(toy), runs_root)
    work = run.paths.work
    (work / ".avo" / "scores.jsonl").unlink()
    (work / ".avo").rmdir()
    (work / ".avo").write_text("a candidate file named like avo's folder\n")
    (work / "solution.py").write_text((work / "solution.py").read_text().replace("X = 1.0", "X = 5.0"))
    out = submit(run, "a file named .avo")
    assert out.outcome == "failed"
    assert "work/.avo" in (out.evaluation.result.error or ""), out.evaluation.result.error
    assert [v.n for v in run.state.versions] == [0]
    assert run.lineage.git("rev-parse", "HEAD").strip() == run.state.versions[0].sha


def test_bytecode_planted_in_avos_own_cache_is_never_run(
        runs_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 12's stale .pyc moved from the package's __pycache__ to avo's pycache_prefix,
    # which the agent (same user) writes just as easily, and nothing hashes: the copy's path
    # is fixed for the run (.avo/evaluator/<digest>), so an unchecked-hash .pyc for the
    # copy's harness.py is imported instead of the hashed source. 99,999 was accepted on
    # game2048 (honest 662) with a record that agrees with itself in every check.
    import py_compile

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cache = tmp_path / "cache" / "avo" / "pycache"  # the cache evaluators used to read (now none)

    run = start_run("game2048", runs_root, quick=True)
    (copy,) = (run.paths.private / "evaluator").iterdir()
    source = copy / "avo_target_game2048" / "harness.py"
    forged = tmp_path / "harness.py"
    forged.write_text(source.read_text().replace(
        "    return EvalResult(correct=True, metrics=metrics, notes=_notes(report, settings))",
        "    return EvalResult(correct=True, metrics={k: 99999.0 for k in metrics}, notes='planted')"))
    assert forged.read_text() != source.read_text()
    pyc = cache / str(source.parent).lstrip("/") / f"harness.{sys.implementation.cache_tag}.pyc"
    pyc.parent.mkdir(parents=True, exist_ok=True)
    py_compile.compile(str(forged), cfile=str(pyc), dfile=str(source),
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    agent = run.paths.work / "agent.py"
    agent.write_text(agent.read_text() + "\n# a harmless edit\n")
    out = submit(run, "an agent that planted bytecode")
    assert out.evaluation.scalar is None or out.evaluation.scalar < 99999, (
        f"planted bytecode scored the candidate: {out.evaluation.result}")


def test_the_copy_swapped_while_the_evaluator_imports_it_is_caught(
        runs_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The copy is hashed before and after the evaluation, not while it is imported: a
    # process of the agent's swaps harness.py in the copy as the evaluator starts and puts
    # it back (content and time) half a second later, once it has been imported.
    import threading

    run = start_run("game2048", runs_root, quick=True)
    (copy,) = (run.paths.private / "evaluator").iterdir()
    source = copy / "avo_target_game2048" / "harness.py"
    honest_text, st = source.read_bytes(), source.stat()
    forged = honest_text.replace(
        b"    return EvalResult(correct=True, metrics=metrics, notes=_notes(report, settings))",
        b"    return EvalResult(correct=True, metrics={k: 99999.0 for k in metrics}, notes='swapped')")
    assert forged != honest_text
    pid_file = run.paths.private / "child.pid"
    done = threading.Event()

    def swapper() -> None:
        while not pid_file.exists() and not done.is_set():
            time.sleep(0.001)
        source.chmod(0o644)
        source.write_bytes(forged)
        time.sleep(0.5)  # while the evaluator starts and imports it
        source.write_bytes(honest_text)
        os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))
        source.chmod(st.st_mode)

    thread = threading.Thread(target=swapper)
    thread.start()
    agent = run.paths.work / "agent.py"
    agent.write_text(agent.read_text() + "\n# a harmless edit\n")
    try:
        out = submit(run, "an agent that swaps the copy during the evaluation")
    finally:
        done.set()
        thread.join()
    assert out.evaluation.scalar is None or out.evaluation.scalar < 99999, (
        f"a swapped evaluator scored the candidate: {out.evaluation.result}")


@needs_bwrap
def test_files_a_directory_candidate_leaves_in_the_log_folder_are_capped(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # stdout and stderr stop at 8 MiB, but AVO_LOG_DIR is writable inside the sandbox and
    # everything in it is moved into the run's logs/ after the evaluation, with no cap on
    # size or count: each evaluation can leave gigabytes (or a million files) in the run.
    run = start_run(str(toy), runs_root)
    (run.paths.work / "solution.py").write_text(textwrap.dedent("""
        import os
        from pathlib import Path
        logs = Path(os.environ["AVO_LOG_DIR"])
        chunk = b"x" * (1 << 20)
        with open(logs / "flood.log", "wb") as fh:
            for _ in range(64):
                fh.write(chunk)
        for i in range(3000):
            (logs / f"many-{i}.log").write_text("x")
        X, Y = 7.0, 3.0
        def square(n):
            return n * n
    """))
    stem = evaluate_work(run).evaluation.log_path.stem
    kept = [p for p in run.paths.logs.iterdir() if p.is_file() and p.name.startswith(f"{stem}-")]
    size = sum(p.stat().st_size for p in kept)
    assert size <= (8 << 20) + 4096 and len(kept) < 1000, (
        f"one evaluation left {len(kept)} files and {size >> 20} MiB in the run's logs/")


@needs_bwrap
def test_a_candidate_cannot_write_more_to_disk_than_its_work_limit(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # work/ may hold 256 MiB before a snapshot, but inside the evaluation the snapshot and
    # the scratch folder are writable with no quota (no RLIMIT_FSIZE, no size-bounded
    # mount): a candidate can fill the disk under the run, and then avo's own writes fail.
    run = start_run(str(toy), runs_root)
    (run.paths.work / "solution.py").write_text(textwrap.dedent("""
        import os
        written = 0
        try:
            with open("ballast", "wb") as fh:
                for _ in range(300):
                    fh.write(b"x" * (1 << 20))
                    fh.flush()
                    written += 1
        except OSError:
            pass
        import sys
        print("WROTE_MIB", written, file=sys.stderr)  # the toy evaluator keeps its candidate's stdout
        os.unlink("ballast")
        X, Y = 7.0, 3.0
        def square(n):
            return n * n
    """))
    log = evaluate_work(run).evaluation.log_path.read_text()
    written = int(log.split("WROTE_MIB", 1)[1].split()[0]) if "WROTE_MIB" in log else 0
    assert written <= 256, f"the candidate wrote {written} MiB into its evaluation folder (work limit 256 MiB)"
