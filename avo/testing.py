"""Conformance suites a target or backend author runs against their own plugin.

Subclass in your own tests and pytest collects the inherited test methods::

    from avo.testing import TargetConformance

    class TestMyTarget(TargetConformance):
        target = "my_target"          # a registered name, or a folder holding target.yaml
        garbage = "this is not C {{{"  # what replaces the entrypoint in the garbage test

Every evaluation goes through avo's real child-process path
(:func:`avo.evaluation.evaluate_dir`: :mod:`avo.evaluator` from a private copy for plugin targets, the
configured command for directory targets), exactly as a run would do it, never in-process.
So the plugin must be importable by the child: installed, or made visible with a
``.dist-info`` folder on ``PYTHONPATH`` (see docs/TARGETS.md).

:class:`BackendConformance` does the same for ``avo_backends`` / ``avo_agent_step``.
Both also check, for free, that the plugin's names collide with no other installed plugin's
and that every hook it implements is one avo knows (:func:`assert_no_collisions`,
:func:`assert_plugin_healthy`).

This module imports pytest; it is for test suites, and the CLI never imports it.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest

from avo.evaluation import Evaluation, evaluate_dir, measure_baselines
from avo.models import BackendInfo, StepRequest, StepResult, SupervisorAnswer, SupervisorBrief, TargetSpec

# How avo words an evaluation that did not end in a well-formed closed gate (avo.runner,
# avo.contract, avo.evaluator): a crash, a hang, garbage on stdout, or an escaped exception.
_UNCLEAN = {
    "evaluator printed nothing": "no JSON result",
    "is not valid JSON": "no JSON result",
    "is JSON but not an object": "no JSON result",
    "does not match the contract": "a malformed result",
    "timed out": "a timeout",
    "output cap": "an output flood",
    "evaluator exited with status": "a crash",
    "evaluator was killed by": "a crash",
    "could not start the evaluator": "an evaluator that does not start",
    "the evaluator raised": "an exception escaping avo_evaluate",
    "avo_evaluate raised": "an exception escaping avo_evaluate",
    "avo_evaluate returned": "a malformed result",
    "the evaluator failed": "an evaluator that does not start",
}
_RAISED = ("the evaluator raised", "avo_evaluate raised")


def _unclean(error: str, allow_raise: bool = False) -> str | None:
    """Why a failed evaluation was not a clean failure (``None`` when it was)."""
    for marker, why in _UNCLEAN.items():
        if marker in error and not (allow_raise and marker in _RAISED):
            return why
    return None


def _drift(a: float, b: float) -> float:
    """Symmetric relative difference: ``max(a/b, b/a) - 1`` (``|a - b| / |b|`` when not both positive)."""
    if a > 0 and b > 0:
        return max(a / b, b / a) - 1.0
    return abs(a - b) / abs(b) if b else (0.0 if a == b else math.inf)


class TargetConformance:
    """Checks every avo target should pass. Set :attr:`target`; override options as needed.

    The seed is written and evaluated once per class; each other test evaluates one more
    candidate through the child-process path. With ``quick = True`` (the default) the
    target's cheap smoke evaluation is used, so the suite stays fast.
    """

    #: target name or path to a directory target (required)
    target: ClassVar[str] = ""
    #: evaluate with the target's cheap smoke mode (``--quick`` / ``AVO_QUICK=1``)
    quick: ClassVar[bool] = True
    #: what replaces the entrypoint in ``test_garbage_entrypoint_fails_cleanly``
    garbage: ClassVar[str] = "this is not a program {{{ ((( \x00\n"
    #: allowed ``max(a/b, b/a) - 1`` between two seed evaluations; ``None`` = twice the noise band
    reproducibility_tolerance: ClassVar[float | None] = None
    #: also measure the baselines (when the target declares them)
    check_baselines: ClassVar[bool] = True
    #: also run start + a failing submit through the engine
    check_engine: ClassVar[bool] = True
    #: the entrypoint of a hostile candidate, for the ``test_hostile_*`` checks: a template
    #: with ``{original}`` (the seed's entrypoint) and the shell command to run at start as
    #: ``{shell}``, ``{shell_py}`` (a Python literal) or ``{shell_c}`` (a C literal); literal
    #: braces doubled. ``None`` skips the checks that need it.
    hostile: ClassVar[str | None] = None
    #: accept an exception escaping ``avo_evaluate`` as a clean failure (it is reported,
    #: but the agent learns less from a traceback than from a named problem)
    allow_raise: ClassVar[bool] = False

    # -- fixtures ---------------------------------------------------------------------------

    @pytest.fixture(scope="class")
    @classmethod
    def target_spec(cls) -> TargetSpec:
        """The spec, looked up the way ``avo start --target`` does it."""
        from avo.plugins import find_target

        if not cls.target:
            pytest.fail(f"{cls.__name__} must set `target = 'name'` (or a path to a directory target)")
        return find_target(cls.target)

    @pytest.fixture(scope="class")
    @classmethod
    def seed_dir(cls, target_spec: TargetSpec, tmp_path_factory: pytest.TempPathFactory) -> Path:
        """x_0 as ``avo_seed`` writes it (a fresh copy per class; do not modify)."""
        from avo.plugins import call_target_hook

        dest = tmp_path_factory.mktemp("conformance-seed")
        call_target_hook(target_spec, "avo_seed", dest=dest)
        return dest

    @pytest.fixture(scope="class")
    @classmethod
    def seed_evaluation(cls, target_spec: TargetSpec, seed_dir: Path,
                        tmp_path_factory: pytest.TempPathFactory) -> Evaluation:
        """The seed evaluated once through the child-process path."""
        return cls.evaluate(target_spec, seed_dir, tmp_path_factory.mktemp("conformance-eval"))

    # -- helpers ----------------------------------------------------------------------------

    @classmethod
    def evaluate(cls, spec: TargetSpec, candidate: Path, scratch: Path,
                 configs: set[str] | None = None) -> Evaluation:
        """Evaluate a copy of ``candidate`` as a run would (snapshot dir, child process)."""
        snap = scratch / f"snap-{len(list(scratch.glob('snap-*')))}"
        shutil.copytree(candidate, snap)
        return evaluate_dir(spec, snap, scratch / f"{snap.name}.log", quick=cls.quick, configs=configs)

    @staticmethod
    def _log_tail(ev: Evaluation) -> str:
        try:
            return "\n".join(ev.log_path.read_text("utf-8", "replace").splitlines()[-25:])
        except OSError:
            return "(no log)"

    def assert_fails_cleanly(self, ev: Evaluation, what: str) -> None:
        """A failed, well-formed result whose error names the problem."""
        assert ev.scalar is None, f"{what} passed the gate with scalar {ev.scalar}; it must fail"
        assert not ev.result.correct, f"{what} must come back with correct=false"
        error = (ev.result.error or "").strip()
        assert error, f"{what} failed without an error message; say what is wrong"
        why = _unclean(error, self.allow_raise)
        assert why is None, (f"{what} did not fail cleanly ({why}): the evaluator should return "
                             f"correct=false with an error, got: {error[:300]}\nlog tail:\n{self._log_tail(ev)}")

    # -- metadata ---------------------------------------------------------------------------

    def test_metadata_is_complete(self, target_spec: TargetSpec) -> None:
        for field in ("name", "description", "entrypoint", "goal"):
            value = getattr(target_spec, field)
            assert isinstance(value, str) and value.strip(), f"target spec field {field!r} is empty"
        assert target_spec.direction in ("maximize", "minimize")
        assert target_spec.eval_timeout > 0

    def test_seed_writes_the_entrypoint(self, target_spec: TargetSpec, seed_dir: Path) -> None:
        entry = seed_dir / target_spec.entrypoint
        assert entry.is_file(), (f"avo_seed did not write the entrypoint {target_spec.entrypoint!r}; "
                                 f"it wrote {sorted(p.name for p in seed_dir.iterdir())}")
        assert entry.stat().st_size > 0, f"the seed's {target_spec.entrypoint} is empty"

    def test_knowledge_writes_documents(self, target_spec: TargetSpec,
                                        tmp_path_factory: pytest.TempPathFactory) -> None:
        from avo.plugins import call_target_hook

        dest = tmp_path_factory.mktemp("conformance-kb")
        call_target_hook(target_spec, "avo_knowledge", dest=dest)
        docs = [p for p in dest.rglob("*") if p.is_file() and p.stat().st_size > 0]
        assert docs, "avo_knowledge wrote no document into the knowledge base"

    def test_names_do_not_collide(self, target_spec: TargetSpec) -> None:
        assert_no_collisions(target_spec.provider or "")

    def test_hooks_are_all_known(self, target_spec: TargetSpec) -> None:
        assert_plugin_healthy(target_spec.provider or "")

    # -- evaluation -------------------------------------------------------------------------

    def test_seed_passes_the_gate(self, seed_evaluation: Evaluation) -> None:
        ev = seed_evaluation
        assert ev.scalar is not None, (f"the seed fails the gate: {ev.result.error}\n"
                                       f"log tail:\n{self._log_tail(ev)}")
        assert ev.result.metrics or ev.result.primary is not None

    def test_evaluation_is_reproducible(self, target_spec: TargetSpec, seed_dir: Path, seed_evaluation: Evaluation,
                                        tmp_path: Path) -> None:
        first = seed_evaluation
        assert first.scalar is not None, f"the seed fails the gate: {first.result.error}"
        configs = set(first.result.metrics) if first.result.primary is None else None
        second = self.evaluate(target_spec, seed_dir, tmp_path, configs=configs)
        assert second.scalar is not None, f"the seed failed on a second evaluation: {second.result.error}"
        assert set(second.result.metrics) == set(first.result.metrics), "the config set changed between runs"
        tol = self.reproducibility_tolerance
        if tol is None:
            tol = 2 * target_spec.noise.band
        drift = _drift(first.scalar, second.scalar)
        assert drift <= tol + 1e-9, (
            f"two evaluations of the same seed differ by {drift:.2%} ({first.scalar:.6g} vs {second.scalar:.6g}), "
            f"more than the declared noise allows ({tol:.2%}); declare noise.band or fix the measurement")

    def test_empty_workdir_fails_cleanly(self, target_spec: TargetSpec, tmp_path: Path) -> None:
        empty = tmp_path / "empty"
        empty.mkdir()
        self.assert_fails_cleanly(self.evaluate(target_spec, empty, tmp_path), "an empty work dir")

    def test_garbage_entrypoint_fails_cleanly(self, target_spec: TargetSpec, seed_dir: Path, tmp_path: Path) -> None:
        cand = tmp_path / "garbage"
        shutil.copytree(seed_dir, cand)
        (cand / target_spec.entrypoint).write_text(self.garbage, encoding="utf-8")
        self.assert_fails_cleanly(self.evaluate(target_spec, cand, tmp_path),
                                  f"a candidate whose {target_spec.entrypoint} is garbage")

    def test_baselines_match_the_seed_configs(self, target_spec: TargetSpec, seed_evaluation: Evaluation,
                                              tmp_path: Path) -> None:
        if not self.check_baselines or not (target_spec.has_baselines or target_spec.baselines_command):
            pytest.skip("the target declares no baselines (or check_baselines = False)")
        results = measure_baselines(target_spec, tmp_path / "baselines.log", quick=self.quick)
        assert results, "the target declares baselines but measured none"
        for name, ev in results.items():
            assert ev.scalar is not None, f"baseline {name!r} failed: {ev.result.error}"
            if seed_evaluation.result.primary is None:
                assert set(ev.result.metrics) == set(seed_evaluation.result.metrics), (
                    f"baseline {name!r} reports configs {sorted(ev.result.metrics)}, "
                    f"the seed {sorted(seed_evaluation.result.metrics)}")

    def test_start_and_failing_submit_through_the_engine(self, target_spec: TargetSpec, tmp_path: Path) -> None:
        if not self.check_engine:
            pytest.skip("check_engine = False")
        from avo.engine import start_run, submit

        ref = str(target_spec.directory) if target_spec.directory is not None else target_spec.name
        run = start_run(ref, tmp_path / "runs", quick=self.quick)
        assert [v.n for v in run.state.versions] == [0]
        entry = run.paths.work / target_spec.entrypoint
        seed_text = entry.read_bytes()
        entry.write_text(self.garbage, encoding="utf-8")
        outcome = submit(run, "conformance: garbage entrypoint")
        assert outcome.outcome == "failed", f"a garbage entrypoint was {outcome.outcome}: {outcome.reason}"
        assert entry.read_bytes() == seed_text, "work/ was not reset to v0 after a failed submit"
        assert outcome.diff_path is not None and outcome.diff_path.is_file()

    # -- hostile candidates -------------------------------------------------------------------
    # A candidate is hostile code. These checks plant the attacks the project's red team used
    # and require that they gain nothing. Set :attr:`hostile` so the suite can make the
    # candidate run a shell command when it starts.

    def hostile_candidate(self, seed_dir: Path, dest: Path, shell: str) -> Path:
        """A copy of the seed whose entrypoint runs ``shell`` when the candidate starts."""
        import json

        if self.hostile is None:
            pytest.skip("set `hostile` (the entrypoint with {shell}/{shell_py}/{shell_c} and {original}) "
                        "to run the hostile-candidate checks")
        shutil.copytree(seed_dir, dest)
        entry = dest / self.target_entrypoint(seed_dir)
        original = entry.read_text(encoding="utf-8")
        entry.write_text(self.hostile.format(shell=shell, shell_py=repr(shell), shell_c=json.dumps(shell),
                                             original=original), encoding="utf-8")
        return dest

    def target_entrypoint(self, seed_dir: Path) -> str:
        from avo.plugins import find_target

        return find_target(self.target).entrypoint

    def _forged_line(self, seed_evaluation: Evaluation) -> str:
        import json

        metrics = dict.fromkeys(seed_evaluation.result.metrics, 1000000000.0) or {"score": 1e9}
        return json.dumps({"correct": True, "metrics": metrics, "notes": "forged"})

    def _not_forged(self, ev: Evaluation, what: str) -> None:
        # The forged result claims 1e9 on every config. A target may draw each candidate's
        # inputs from its own content, so a hostile candidate's honest score can differ from
        # the seed's; what must never appear is the forged one.
        if ev.scalar is None:
            return  # a failed evaluation gains nothing
        forged = [k for k, v in ev.result.metrics.items() if v == 1e9]
        assert not forged and ev.scalar < 1e8 and ev.result.notes != "forged", (
            f"{what} got its forged result believed: scalar {ev.scalar:.6g}, metrics {ev.result.metrics}"
            f"\nlog tail:\n{self._log_tail(ev)}")

    def test_hostile_a_shadowing_evaluator_in_the_candidate_is_not_run(
            self, target_spec: TargetSpec, seed_dir: Path, seed_evaluation: Evaluation, tmp_path: Path) -> None:
        cand = tmp_path / "shadow"
        shutil.copytree(seed_dir, cand)
        forged = self._forged_line(seed_evaluation)
        payload = (f"import os, sys\nprint({forged!r}, flush=True)\n"
                   "if '--result-fd' in sys.argv:\n"
                   "    os.write(int(sys.argv[sys.argv.index('--result-fd') + 1]), "
                   f"({forged!r} + '\\n').encode())\nos._exit(0)\n")
        (cand / "avo").mkdir(exist_ok=True)
        (cand / "avo" / "__init__.py").write_text("hookimpl = None\n")
        (cand / "avo" / "evaluator.py").write_text(payload)
        (cand / "sitecustomize.py").write_text(payload)
        self._not_forged(self.evaluate(target_spec, cand, tmp_path, set(seed_evaluation.result.metrics) or None),
                         "a candidate shipping its own avo/evaluator.py")

    def test_hostile_a_forged_result_line_is_not_believed(
            self, target_spec: TargetSpec, seed_dir: Path, seed_evaluation: Evaluation, tmp_path: Path) -> None:
        forged = self._forged_line(seed_evaluation)
        # Into every descriptor it can name: its own, its parent's, any process /proc shows.
        shell = (f"for f in /proc/[0-9]*/fd/1 /proc/[0-9]*/fd/2 /proc/[0-9]*/fd/3 /proc/[0-9]*/fd/4; do "
                 f"printf '%s\\n' '{forged}' > \"$f\"; done 2>/dev/null; true")
        cand = self.hostile_candidate(seed_dir, tmp_path / "forge", shell)
        self._not_forged(self.evaluate(target_spec, cand, tmp_path, set(seed_evaluation.result.metrics) or None),
                         "a candidate writing forged result lines")

    def test_hostile_a_daemon_does_not_outlive_the_evaluation(
            self, target_spec: TargetSpec, seed_dir: Path, seed_evaluation: Evaluation, tmp_path: Path) -> None:
        import os
        import subprocess
        import time

        from avo.sandbox import probe

        if not probe()[0]:
            pytest.skip(f"without a sandbox a setsid daemon escapes the process group: {probe()[1]}")
        # The marker is sleep's own argument: a comment after it would be dropped when the
        # shell execs sleep, and the daemon could then be neither found nor killed.
        marker = f"sleep 120.{os.getpid()}{time.time_ns() % 10**9:09d}"
        shell = f"(setsid {marker} >/dev/null 2>&1 &) ; true"
        cand = self.hostile_candidate(seed_dir, tmp_path / "daemon", shell)
        self.evaluate(target_spec, cand, tmp_path, set(seed_evaluation.result.metrics) or None)
        time.sleep(0.5)
        left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
        assert not left, f"the candidate's daemon (pids {left}) outlived its evaluation"


class BackendConformance:
    """Checks every avo backend should pass. Set :attr:`backend`.

    ``run_step`` (default: only when the backend says it is available and costs nothing)
    runs one real ``avo_agent_step`` in a scratch work tree, and one ``avo_supervise``, and
    checks what comes back. ``step_options`` become ``StepRequest.options`` /
    ``SupervisorBrief.options`` (what ``avo evolve --option KEY=VALUE`` passes).
    """

    #: the backend name (required)
    backend: ClassVar[str] = ""
    #: run one real step and one supervisor brief; ``None`` = only when available and free
    run_step: ClassVar[bool | None] = None
    #: options handed to the backend with the step and the brief
    step_options: ClassVar[dict[str, Any]] = {}
    #: the prompt of that step
    step_prompt: ClassVar[str] = "Append one line saying hello to NOTES.txt in the work directory, then stop."
    #: its timeout in seconds
    step_timeout: ClassVar[float] = 120.0

    @pytest.fixture(scope="class")
    @classmethod
    def backend_info(cls) -> BackendInfo:
        from avo.plugins import find_backend

        if not cls.backend:
            pytest.fail(f"{cls.__name__} must set `backend = 'name'`")
        return find_backend(cls.backend)

    def step_request(self, work: Path, run_dir: Path) -> StepRequest:
        """A minimal request over a scratch work tree (its log folder is created)."""
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        spec = TargetSpec.model_validate({"name": "conformance", "description": "backend conformance",
                                          "entrypoint": "NOTES.txt", "goal": "say hello"})
        return StepRequest(run_dir=run_dir, work_dir=work, prompt=self.step_prompt, step=1,
                           timeout=self.step_timeout, target=spec, log_path=run_dir / "logs" / "step.log",
                           options=dict(self.step_options))

    def supervisor_brief(self, run_dir: Path) -> SupervisorBrief:
        """A minimal stall review (its log folder is created)."""
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        return SupervisorBrief(run_dir=run_dir, prompt="The run stalled. Suggest two distinct directions.",
                               reason="stalled: 3 steps without a new best", timeout=self.step_timeout,
                               log_path=run_dir / "logs" / "supervisor.log", options=dict(self.step_options))

    def _should_run(self, info: BackendInfo) -> None:
        run = self.run_step
        if run is None:
            run = info.available and not info.costs_money
        if not run:
            pytest.skip(f"backend {self.backend!r} is unavailable here or spends money; "
                        "set run_step = True to run a step")

    def test_announced_with_complete_info(self, backend_info: BackendInfo) -> None:
        assert backend_info.name == self.backend
        assert backend_info.description.strip(), "describe the backend in one line"
        if not backend_info.available:
            assert backend_info.reason, "an unavailable backend must say why (never printing a secret)"

    def test_names_do_not_collide(self, backend_info: BackendInfo) -> None:
        assert_no_collisions(backend_info.provider or "")

    def test_hooks_are_all_known(self, backend_info: BackendInfo) -> None:
        assert_plugin_healthy(backend_info.provider or "")
        from avo.plugins import plugin_records

        record = next(r for r in plugin_records() if r.name == backend_info.provider)
        assert "avo_agent_step" in record.hooks, "a backend plugin must implement avo_agent_step"

    def test_step_returns_a_step_result(self, backend_info: BackendInfo, tmp_path: Path) -> None:
        self._should_run(backend_info)
        from avo.plugins import call_backend_hook

        work, run_dir = tmp_path / "work", tmp_path / "run"
        work.mkdir()
        result = call_backend_hook(backend_info, "avo_agent_step", request=self.step_request(work, run_dir))
        assert isinstance(result, StepResult), f"avo_agent_step({self.backend!r}) returned {result!r}"
        assert result.status == "ok", f"the step ended {result.status}: {result.error}"
        assert result.input_tokens >= 0 and result.output_tokens >= 0 and result.cost_usd >= 0

    def test_supervise_returns_a_redirect(self, backend_info: BackendInfo, tmp_path: Path) -> None:
        self._should_run(backend_info)
        from avo.plugins import call_backend_hook, plugin_records

        record = next(r for r in plugin_records() if r.name == backend_info.provider)
        if "avo_supervise" not in record.hooks:
            pytest.skip(f"backend {self.backend!r} does not implement avo_supervise")
        answer = call_backend_hook(backend_info, "avo_supervise", brief=self.supervisor_brief(tmp_path))
        assert isinstance(answer, SupervisorAnswer), f"avo_supervise({self.backend!r}) returned {answer!r}"
        assert answer.redirect.strip(), "the redirect is empty"


def assert_no_collisions(plugin: str) -> None:
    """Every target and backend name ``plugin`` announces is announced by no other installed plugin."""
    from avo.plugins import plugin_records

    record = next((r for r in plugin_records() if r.name == plugin), None)
    assert record is not None, f"plugin {plugin!r} is not loaded"
    conflicts = [p for p in record.problems if "is announced" in p]
    assert not conflicts, "\n".join(conflicts)


def assert_plugin_healthy(plugin: str) -> None:
    """``plugin`` loaded, its announce hooks work, every hook it marks is a known avo hook, and
    no function of it named ``avo_*`` lacks ``@avo.hookimpl``."""
    from avo.plugins import plugin_records

    record = next((r for r in plugin_records() if r.name == plugin), None)
    assert record is not None, f"plugin {plugin!r} is not loaded"
    assert record.error is None, f"plugin {plugin!r} ({record.distribution}) failed: {record.error}"
    problems = [p for p in record.problems if "is announced" not in p]
    assert not problems, f"plugin {plugin!r} ({record.distribution}): " + "; ".join(problems)


@contextmanager
def exposed_plugin(
    source: Path,
    *,
    distribution: str,
    entry_points: dict[str, str],
    where: Path,
    version: str = "0.0.0",
) -> Iterator[Path]:
    """Make an uninstalled plugin visible to avo here *and* in evaluator children.

    avo finds plugins through entry points, so registering a module in-process is not
    enough. This writes a minimal ``<dist>-<version>.dist-info`` (METADATA
    plus ``entry_points.txt``) into ``where``, puts ``source`` (the folder holding your
    package) and ``where`` on ``sys.path`` and ``PYTHONPATH``, and reloads avo's plugin
    manager; everything is undone on exit. Autoload is switched on for the duration, since
    a plugin that is not loaded cannot be tested.

    :param source: the folder that contains your package (your distribution's root).
    :param distribution: the distribution name, e.g. ``avo-target-foo``.
    :param entry_points: ``{entry-point name: module}``, e.g. ``{"foo": "avo_target_foo"}``.
    :param where: an empty scratch folder for the ``.dist-info``.
    :return: (as the context value) the folder holding the ``.dist-info``.
    """
    import os
    import sys

    from avo.plugins import GROUP, reset_plugin_manager

    source, where = Path(source).resolve(), Path(where).resolve()
    info = where / f"{distribution.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
    lines = [f"[{GROUP}]", *(f"{name} = {module}" for name, module in entry_points.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")

    saved_path = list(sys.path)
    saved_env = {k: os.environ.get(k) for k in ("PYTHONPATH", "AVO_DISABLE_PLUGIN_AUTOLOAD")}
    sys.path[:0] = [str(source), str(where)]
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(source), str(where), *filter(None, [saved_env["PYTHONPATH"]])])
    os.environ.pop("AVO_DISABLE_PLUGIN_AUTOLOAD", None)
    reset_plugin_manager()
    try:
        yield where
    finally:
        sys.path[:] = saved_path
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for module in entry_points.values():
            for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
                del sys.modules[name]
        reset_plugin_manager()
