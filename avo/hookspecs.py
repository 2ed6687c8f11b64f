"""The hooks through which avo talks to targets, backends and executors.

A plugin is a module registered under the ``avo`` entry-point group::

    [project.entry-points.avo]
    foo = "avo_target_foo"

and implements any of these with ``@avo.hookimpl``. Hooks keyed by a target or backend
are ``firstresult``: return ``None`` for names that are not yours.
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
    no heavy imports, no measurements.

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
    """Write the seed program x_0 into the empty directory ``dest``.

    :param target: the spec of the target being started.
    :param dest: an existing, empty directory (the run's ``work/``).
    :return: ``True`` once written; ``None`` if ``target`` is not yours.
    """


@hookspec(firstresult=True)
def avo_knowledge(target: TargetSpec, dest: Path) -> bool | None:
    """Write the knowledge base K (documents the agent may read) into ``dest``.

    :param target: the spec of the target being started.
    :param dest: an existing, empty directory (the run's ``kb/``).
    :return: ``True`` once written; ``None`` if ``target`` is not yours.
    """


@hookspec(firstresult=True)
def avo_evaluate(target: TargetSpec, workdir: Path, options: EvalOptions) -> EvalResult | None:
    """Score the candidate in ``workdir`` and return the evaluator contract.

    avo always calls this inside a child process (``python -m avo.evaluator``) with
    resource limits and a timeout, never in the process that holds the run state. Print
    anything you like; the result is what you return. Put a failed gate in
    ``EvalResult(correct=False, error=...)`` with a message that tells the agent what went
    wrong; raising is also a failed evaluation, but a less helpful one.

    :param target: the spec of the target.
    :param workdir: a directory holding the candidate; treat it as untrusted code.
    :param options: ``quick`` for a cheaper smoke evaluation, ``log_dir`` for full logs.
    :return: the result, or ``None`` if ``target`` is not yours.
    """


@hookspec(firstresult=True)
def avo_baselines(target: TargetSpec, options: EvalOptions) -> dict[str, EvalResult] | None:
    """Measure reference policies or kernels once, when a run starts (optional).

    Shown to the agent and drawn as horizontal lines in plots.

    :return: ``{baseline name: result}`` with the same metric keys as ``avo_evaluate``,
        or ``None`` if ``target`` is not yours or has no baselines.
    """


@hookspec
def avo_backends() -> list[BackendInfo]:
    """Announce the agent backends this plugin provides for ``avo evolve``.

    Say whether each can run here (a CLI on PATH, a key in the environment) without
    ever printing the key itself.
    """


@hookspec(firstresult=True)
def avo_agent_step(backend: str, request: StepRequest) -> StepResult | None:
    """Run one variation step: an agent works in ``request.work_dir`` until it stops.

    The backend does not commit, tag or judge: when it returns, avo evaluates what is in
    the work tree and applies the commit policy. Honour ``request.timeout``.

    :param backend: the backend name the user chose; return ``None`` if not yours.
    :param request: prompt, paths, step number, timeout, model and options.
    :return: status, a one-line message (used as the commit message), usage and cost.
    """


@hookspec(firstresult=True)
def avo_supervise(backend: str, brief: SupervisorBrief) -> SupervisorAnswer | None:
    """Answer a supervisor brief (a stall review) with a redirect.

    The redirect is injected into exactly one following variation prompt. The supervisor
    reviews; it should not edit the work tree.

    :param backend: the backend name; return ``None`` if not yours.
    :param brief: the review prompt and why the run stalled.
    :return: the redirect text and usage.
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
