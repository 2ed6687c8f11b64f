"""The hooks through which avo talks to targets, backends and executors.

A plugin is a module registered under the ``avo`` entry-point group::

    [project.entry-points.avo]
    foo = "avo_target_foo"

and implements any of these with ``@avo.hookimpl``. Hooks keyed by a target or backend
(``target=`` or ``backend=``) are called only on the plugin that announced that name in
``avo_targets``/``avo_backends`` (see :func:`avo.plugins.call_target_hook`), so an
implementation never sees another plugin's names and needs no "is this mine?" check.
What a hook returns is validated against the model named in its signature.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:  # the models are only annotations here; `avo --help` should not build them
    from pathlib import Path

    from avo.models import (
        BackendInfo,
        EvalJob,
        EvalOptions,
        EvalResult,
        ExecutorCheck,
        ExecutorInfo,
        JobResult,
        StepRequest,
        StepResult,
        SupervisorAnswer,
        SupervisorBrief,
        TargetSpec,
    )

hookspec = pluggy.HookspecMarker("avo")
hookimpl = pluggy.HookimplMarker("avo")


@hookspec
def avo_targets() -> list[TargetSpec]:
    """Announce the targets this plugin serves.

    Called for ``avo targets`` and whenever a target is looked up by name. Keep it cheap:
    no heavy imports, no measurements. A name another plugin announces too is a conflict:
    neither is used. Raising, or returning anything but a list of specs, marks the plugin
    failed in ``avo plugins`` and skips what it announced.

    :return: a list of :class:`avo.models.TargetSpec` (name, description, entrypoint,
        direction, timeouts, goal, limits, noise band, requirements).
    """


@hookspec(firstresult=True)
def avo_resolve_target(ref: str) -> TargetSpec | None:
    """Turn a reference that is not a registered target name into a spec.

    The built-in directory plugin answers for paths to folders holding ``target.yaml``.

    :param ref: what the user passed to ``--target``.
    :return: a spec, or ``None`` when ``ref`` is not something this plugin understands.
    """


@hookspec(firstresult=True)
def avo_seed(target: TargetSpec, dest: Path) -> bool | None:
    """Write the seed program x_0 into the empty directory ``dest`` (required for a target).

    :param target: the spec of one of your targets, as you announced it.
    :param dest: an existing, empty directory (the run's ``work/``).
    :return: nothing (``True`` is accepted too); writing no file at all is an error.
    """


@hookspec(firstresult=True)
def avo_knowledge(target: TargetSpec, dest: Path) -> bool | None:
    """Write the knowledge base K (documents the agent may read) into ``dest`` (optional).

    :param target: the spec of one of your targets.
    :param dest: an existing, empty directory (the run's ``kb/``).
    :return: nothing (``True`` is accepted too).
    """


@hookspec(firstresult=True)
def avo_evaluate(target: TargetSpec, workdir: Path, options: EvalOptions) -> EvalResult | None:
    """Score the candidate in ``workdir`` and return the evaluator contract.

    avo always calls this inside a child process (:mod:`avo.evaluator`, run with
    ``python -I`` from a private copy of your package made when the run started) with
    resource limits and a timeout, never in the process that holds the run state. Start
    every process that runs candidate code with :func:`avo.sandbox.popen`. Print
    anything you like; the result is what you return. Put a failed gate in
    ``EvalResult(correct=False, error=...)`` with a message that tells the agent what went
    wrong; raising is also a failed evaluation, but a less helpful one.

    :param target: the spec of one of your targets.
    :param workdir: a directory holding the candidate; treat it as untrusted code.
    :param options: ``quick`` for a cheaper smoke evaluation, ``log_dir`` for full logs.
    :return: an :class:`avo.models.EvalResult` (anything else is a failed evaluation that
        says what was returned).
    """


@hookspec(firstresult=True)
def avo_baselines(target: TargetSpec, options: EvalOptions) -> dict[str, EvalResult] | None:
    """Measure reference policies or kernels once, when a run starts (optional).

    Shown to the agent and drawn as horizontal lines in plots.

    :return: ``{baseline name: result}`` with the same metric keys as ``avo_evaluate``,
        or ``None`` when the target has no baselines.
    """


@hookspec
def avo_backends() -> list[BackendInfo]:
    """Announce the agent backends this plugin provides for ``avo evolve``.

    Say whether each can run here (a CLI on PATH, a key in the environment) without
    ever printing the key itself. As for :func:`avo_targets`, a name announced twice is a
    conflict and a failing announcement is skipped.
    """


@hookspec(firstresult=True)
def avo_agent_step(backend: str, request: StepRequest) -> StepResult | None:
    """Run one variation step: an agent works in ``request.work_dir`` until it stops.

    The backend does not commit, tag or judge: when it returns, avo evaluates what is in
    the work tree and applies the commit policy. Honour ``request.timeout``.

    :param backend: the name of one of your backends (the one the user chose).
    :param request: prompt, paths, step number, timeout, model and options.
    :return: an :class:`avo.models.StepResult`: status, a one-line message (used as the
        commit message), usage and cost. Anything else is recorded as an error step.
    """


@hookspec(firstresult=True)
def avo_supervise(backend: str, brief: SupervisorBrief) -> SupervisorAnswer | None:
    """Answer a supervisor brief (a stall review) with a redirect.

    The redirect is injected into exactly one following variation prompt. The supervisor
    reviews; it should not edit the work tree.

    :param backend: the name of one of your backends.
    :param brief: the review prompt and why the run stalled.
    :return: an :class:`avo.models.SupervisorAnswer`: the redirect text and usage.
    """


@hookspec
def avo_executors() -> list[ExecutorInfo]:
    """Announce the executors this plugin provides: where and how evaluations run.

    The core's ``local`` executor runs each evaluation in a child process here. Keep it
    cheap: no connection to a cluster, no heavy imports.
    """


@hookspec(firstresult=True)
def avo_execute(executor: str, job: EvalJob, options: dict[str, str]) -> JobResult | None:
    """Run one evaluation job to its end and return its result (blocking).

    Run it exactly as the local executor does (:func:`avo.executors.run_job`: the same
    evaluator copy, sandbox, limits and timeout), wherever that is. Never raise for a failed,
    lost or timed-out evaluation: return a failed :class:`avo.models.EvalResult` whose error
    says what happened. avo may call this from several threads at once, up to the capacity
    :func:`avo_executor_check` reported.

    :param executor: the executor name of the run; return ``None`` if not yours.
    :param job: the candidate archive, the recorded evaluator hashes, the secret, the timeout.
    :param options: the run's ``--executor-option KEY=VALUE`` pairs.
    """


@hookspec(firstresult=True)
def avo_cancel(executor: str, job_id: str) -> bool | None:
    """Stop the job ``job_id`` if it is still running (called from another thread).

    Its :func:`avo_execute` call then returns a failed result.

    :return: ``True`` if a running job was stopped, ``False`` if none was; ``None`` if not yours.
    """


@hookspec(firstresult=True)
def avo_executor_check(executor: str, target: TargetSpec | None, options: dict[str, str]) -> ExecutorCheck | None:
    """Say whether the executor can run ``target``'s evaluations here (``avo doctor``, run start).

    Check what it needs (a package importable, a cluster reachable, the target's resources
    present) and how many of its jobs can run at the same time.

    :return: the check, or ``None`` if ``executor`` is not yours.
    """
