"""Pydantic models at avo's boundaries: target specs, the evaluator contract, backends.

Every hook argument and return value is one of these, so a plugin author gets validation
and a schema for free. Run state lives in :mod:`avo.state`.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from avo.eval_env import SET_BY_AVO

Direction = Literal["maximize", "minimize"]

# Config and metric names reach commit trailers, prompts and file names: one line, no
# spaces or quotes, so no name can forge a trailer line or break a table.
METRIC_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:+=@,-]{0,127}$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: str | float | int) -> float:
    """Seconds from ``90``, ``"90s"``, ``"30m"``, ``"1.5h"`` or ``"2d"``."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like 90, '90s', '30m' or '2h'")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = _DURATION.match(value)
        if not match:
            raise ValueError(f"expected a duration like 90, '90s', '30m' or '2h', got {value!r}")
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds <= 0 or not math.isfinite(seconds):
        raise ValueError(f"a duration must be positive, got {value!r}")
    return seconds


class ResourceLimits(BaseModel):
    """Limits applied to the evaluator's child process (``setrlimit``), ``None`` = unlimited.

    The defaults stop a runaway candidate (fork bomb, memory leak, spinning loop) from
    taking the machine down while leaving room for real work on a 2-core, 24 GiB box.
    """

    model_config = ConfigDict(extra="forbid")

    address_space_mb: int | None = Field(16384, gt=0, description="RLIMIT_AS in MiB")
    cpu_seconds: int | None = Field(3600, gt=0, description="RLIMIT_CPU of the evaluator")
    processes: int | None = Field(4096, gt=0, description="RLIMIT_NPROC (per user)")
    open_files: int | None = Field(1024, gt=0, description="RLIMIT_NOFILE")
    # A candidate writing into its snapshot or scratch folder writes to the real disk.
    file_size_mb: int | None = Field(256, gt=0, description="RLIMIT_FSIZE in MiB (the largest file written)")


class NoiseSpec(BaseModel):
    """How noisy a target's scalar is, so acceptance can tell a gain from luck.

    ``band`` is the relative spread of one measurement (0.03 = ±3 %). A candidate whose
    gain over the best is inside the band is re-measured ``confirm_runs`` times,
    interleaved with the best version, and the medians decide. With ``recheck_gains`` a
    gain beyond the band is measured once more before it is taken: one look is where a
    lucky draw, or a machine that slowed the reference, would enter the lineage.
    """

    model_config = ConfigDict(extra="forbid")

    band: float = Field(0.0, ge=0.0, lt=1.0)
    confirm_runs: int = Field(3, ge=1, le=50)
    recheck_gains: bool = True


class WorkLimits(BaseModel):
    """How much ``work/`` may hold when avo snapshots it (checked before every snapshot).

    A candidate is source code: 100k files or a 300 MB blob is a mistake (a build folder, a
    dataset, a core dump) that would make every snapshot, diff and backup slow and huge.
    """

    model_config = ConfigDict(extra="forbid")

    files: int = Field(20_000, gt=0, description="Most files in work/ (outside .git)")
    bytes: int = Field(256 * 1024 * 1024, gt=0, description="Most bytes in work/ (outside .git)")


class TargetResources(BaseModel):
    """What one evaluation of a target holds on the machine that runs it.

    The local executor runs one evaluation at a time and only checks ``gpus`` (``avo
    doctor``); a cluster executor (Ray) places each evaluation on a node with these free,
    e.g. a whole GPU of a given type, so two timed evaluations never share a device.
    """

    model_config = ConfigDict(extra="forbid")

    cpus: float = Field(1, gt=0, description="CPU cores one evaluation uses")
    gpus: float = Field(0, ge=0, description="GPUs one evaluation uses (0 = none)")
    memory_mb: int | None = Field(None, gt=0, description="Host memory one evaluation uses, MiB")
    accelerator: str | None = Field(None, min_length=1, description="Accelerator kind, e.g. 'cuda' or 'H100'")


_CODE_LOADING = ("LD_", "PYTHON")
# What avo sets per evaluation.


class TargetSpec(BaseModel):
    """What a target announces through ``avo_targets`` (or a ``target.yaml``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    entrypoint: str = Field(description="The file the agent evolves, named in prompts")
    direction: Direction = "maximize"
    goal: str = Field("", description="What the agent is trying to do and the trade-offs")
    eval_timeout: float = Field(1800.0, gt=0, description="Seconds before the evaluator is killed")
    baseline_timeout: float = Field(3600.0, gt=0)
    has_baselines: bool = False
    limits: ResourceLimits = Field(default_factory=ResourceLimits)
    work_limits: WorkLimits = Field(default_factory=WorkLimits)
    resources: TargetResources = Field(default_factory=TargetResources)
    noise: NoiseSpec = Field(default_factory=NoiseSpec)
    stall_limit: int = Field(3, ge=1, description="Steps without a new best before the supervisor")
    tie_tolerance: float = Field(
        1e-9, ge=0.0, lt=0.1, description="Relative difference under which two scores are a tie (a match)"
    )
    precision: int | None = Field(
        None, ge=1, le=15, description="Significant digits shown for scores (default: from the lineage's spread)"
    )
    has_quick: bool = Field(False, description="The evaluator has a cheaper quick mode (AVO_QUICK=1 / --quick)")
    requirements: list[str] = Field(
        default_factory=list, description="Import names the evaluator needs (checked by doctor)"
    )
    # Set for directory targets: the evaluator is this command, run as the child directly.
    directory: Path | None = None
    evaluate_command: list[str] | None = None
    baselines_command: list[str] | None = None
    isolate_candidate: bool = Field(
        False, description="A directory target's evaluator runs outside the sandbox and starts every candidate "
        "process inside one, through the command in $AVO_CANDIDATE_PREFIX (target.yaml `isolation: candidate`); "
        "otherwise its whole command is sandboxed, with the candidate processes it starts beside it")
    settings_env: list[str] = Field(
        default_factory=list, description="Environment variables the evaluator reads as settings (a thread "
        "count, a dtype): their values when a run starts are recorded in `settings`, and every evaluation "
        "of that run gets exactly those, whatever the shell that runs `avo submit` holds")
    settings: dict[str, str] | None = Field(
        None, description="The values `settings_env` had when the run started (a name left out was unset "
        "then, and stays unset for the run's evaluations); filled in by avo. None outside a run: an "
        "evaluation of the spec as installed takes the settings from the environment")
    # Filled in by the plugin manager: which plugin serves this target.
    provider: str | None = None

    @model_validator(mode="after")
    def _settings_are_declared(self) -> TargetSpec:
        for name in self.settings_env:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"settings_env names {name!r}, which is not an environment variable name")
            # A setting reaches the trusted evaluator past the scrub of its environment: never
            # one that loads code into it (LD_PRELOAD, LD_AUDIT, PYTHONPATH, PYTHONSTARTUP).
            if name.upper().startswith(_CODE_LOADING):
                raise ValueError(f"settings_env names {name}, which loads code into the evaluator: it is never "
                                 "a setting")
            if name.upper() in SET_BY_AVO:
                raise ValueError(f"settings_env names {name}, which avo sets for every evaluation itself")
        stray = sorted(set(self.settings or {}) - set(self.settings_env))
        if stray:
            raise ValueError(f"settings holds {', '.join(stray)}, which settings_env does not name")
        return self


class EvalOptions(BaseModel):
    """Options passed to ``avo_evaluate`` / ``avo_baselines``."""

    model_config = ConfigDict(extra="allow")

    quick: bool = Field(False, description="A cheaper smoke evaluation (tests, demos)")
    log_dir: Path | None = Field(None, description="Where the evaluator may write full logs")
    seed: int | None = None
    secret: str | None = Field(
        None, description="This evaluation's secret: fresh random bytes drawn when it starts, known "
        "only to the trusted evaluator, recorded in the trajectory after it ends (so `avo verify` "
        "replays it). With the candidate's content it derives inputs nobody can know in advance: "
        "see avo.eval_inputs. None outside a run (conformance suites).")


class EvalResult(BaseModel):
    """The evaluator contract: one JSON object, the last line of the evaluator's stdout.

    ``correct`` is a gate, not a dimension. ``metrics`` is the score vector (one number per
    benchmark configuration); the scalar is their geometric mean unless ``primary`` is set.
    """

    model_config = ConfigDict(extra="forbid")

    correct: bool
    metrics: dict[str, float] = Field(default_factory=dict)
    error: str | None = None
    notes: str | None = None
    primary: float | None = None
    spread: dict[str, float] | None = None

    @field_validator("metrics", "spread")
    @classmethod
    def _finite_metrics(cls, metrics: dict[str, float] | None) -> dict[str, float] | None:
        for key, value in (metrics or {}).items():
            if not METRIC_NAME.fullmatch(key):
                raise ValueError(f"metric name {key!r} is not a single-line identifier "
                                 "(letters, digits and _ . : + = @ , - only)")
            if not math.isfinite(value):
                raise ValueError(f"metric {key!r} is not finite ({value})")
        return metrics

    @field_validator("primary")
    @classmethod
    def _finite_primary(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError(f"primary is not finite ({value})")
        return value

    @model_validator(mode="after")
    def _gate_consistent(self) -> EvalResult:
        if self.correct and not self.metrics and self.primary is None:
            raise ValueError("a correct result needs metrics or a primary scalar")
        return self


class BackendInfo(BaseModel):
    """What a backend plugin announces through ``avo_backends``."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    needs: list[str] = Field(default_factory=list, description="What it needs, in words")
    available: bool = True
    reason: str | None = Field(None, description="Why it cannot run here, never a secret")
    costs_money: bool = False
    required_options: dict[str, str | None] = Field(
        default_factory=dict,
        description="Options a step cannot run without: {option: environment variable that may stand in, or null}",
    )
    provider: str | None = None

    def missing_options(self, options: dict[str, str]) -> list[str]:
        """Each required option given neither as ``--option`` nor through its environment variable, in words."""
        import os

        missing = []
        for key, env in self.required_options.items():
            if str(options.get(key) or "").strip() or (env and os.environ.get(env, "").strip()):
                continue
            missing.append(f"--option {key}=..." + (f" (or ${env})" if env else ""))
        return missing


class StepRequest(BaseModel):
    """One variation step handed to ``avo_agent_step``."""

    model_config = ConfigDict(extra="allow")

    run_dir: Path
    work_dir: Path
    prompt: str
    step: int
    timeout: float = Field(2700.0, gt=0)
    target: TargetSpec
    log_path: Path
    model: str | None = None
    base_url: str | None = None
    seed: int | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class StepResult(BaseModel):
    """What a backend reports after one step. Scores it claims are never used."""

    model_config = ConfigDict(extra="allow")

    status: Literal["ok", "error", "timeout", "interrupted"] = "ok"
    message: str = Field("", description="The agent's one-line summary, used as commit message")
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0


class SupervisorBrief(BaseModel):
    """A stall review handed to ``avo_supervise``."""

    model_config = ConfigDict(extra="allow")

    run_dir: Path
    prompt: str
    reason: str
    timeout: float = 1200.0
    log_path: Path
    model: str | None = None
    base_url: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class SupervisorAnswer(BaseModel):
    """The redirect a backend returns for a brief."""

    model_config = ConfigDict(extra="allow")

    redirect: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


class ExecutorInfo(BaseModel):
    """What an executor plugin announces through ``avo_executors``."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    remote: bool = Field(False, description="Evaluations may run on another machine")
    provider: str | None = None


class ExecutorCheck(BaseModel):
    """An executor's answer to ``avo_executor_check``: is it ready, and how many jobs at once."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    lines: list[str] = Field(default_factory=list, description="What was checked, one line each")
    problems: list[str] = Field(default_factory=list, description="What is missing, with the fix")
    capacity: int = Field(1, ge=1, description="Jobs of this target that can run at the same time")


class EvalJob(BaseModel):
    """One evaluation, with everything a worker on another machine needs to run it honestly.

    The candidate travels as an uncompressed tar of the exported snapshot, addressed by its
    sha256; the worker refuses to run unless its installed evaluator hashes to
    ``evaluator_hashes`` (and, for a plugin target, its avo and start-up files to
    ``runtime_hashes``), exactly as the run recorded them at start. ``archive`` is raw bytes:
    send it apart from the job's JSON (the Ray executor puts it in the object store).
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Unique per evaluation, for logs and cancel")
    label: str
    run_id: str | None = None
    target: TargetSpec
    baselines: bool = False
    tree: str | None = Field(None, description="The candidate's git tree id")
    archive: bytes | None = Field(None, description="tar of the candidate snapshot (None for baselines)")
    archive_sha256: str | None = None
    quick: bool = False
    screening: bool = False
    configs: list[str] | None = Field(None, description="The configs a result must report (None: any)")
    evaluator_hashes: dict[str, str] = Field(default_factory=dict)
    runtime_hashes: dict[str, str] = Field(default_factory=dict)
    sandbox: Literal["bwrap", "none"] = "none"
    secret: str | None = None
    timeout: float = Field(gt=0, description="The in-task timeout of the evaluator child")
    # For the local executor only: the run's private folder and where the log goes.
    workspace: Path | None = None
    log_path: Path | None = None


class JobResult(BaseModel):
    """What an executor returns for a job: the result and where it was produced."""

    model_config = ConfigDict(extra="forbid")

    result: EvalResult | None = Field(None, description="The candidate's result (None for baselines)")
    baselines: dict[str, EvalResult] | None = None
    wall_s: float = 0.0
    executor: str = "local"
    node: str | None = None
    accelerator: str | None = None
    cpu: str | None = Field(None, description="The class of the CPU it ran on (avo.host_cpu.cpu_class)")
    log: str = Field("", description="The evaluator's output (tail) when it was not written to job.log_path")
    refused: str | None = Field(None, description="Why the job was not run at all: the evaluator there differs "
                                "from the run's record, or its sandbox cannot start there (not a failure of "
                                "the candidate)")
