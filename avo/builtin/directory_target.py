"""Built-in plugin: any folder holding a ``target.yaml`` is a target.

``avo start --target ./my_target`` resolves through :func:`avo_resolve_target`; folders on
``$AVO_TARGET_PATH`` (``:``-separated) are also listed by name in ``avo targets``. The
evaluator is the configured command, in any language, run as a child process.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from avo.errors import SpecError
from avo.files import copy_contents
from avo.hookspecs import hookimpl
from avo.models import (
    Direction,
    EvalOptions,
    EvalResult,
    NoiseSpec,
    ResourceLimits,
    TargetResources,
    TargetSpec,
    WorkLimits,
    parse_duration,
)

SPEC_FILE = "target.yaml"
PATH_ENV = "AVO_TARGET_PATH"


PLACEHOLDERS = ("target", "workdir", "python")


def _check_placeholders(command: list[str]) -> list[str]:
    """Refuse a command whose ``{...}`` placeholders avo would not fill (found at load time)."""
    import string

    for part in command:
        try:
            names = [name for _, name, _, _ in string.Formatter().parse(part) if name is not None]
        except ValueError as exc:
            raise ValueError(f"bad braces in {part!r} ({exc}); write {{{{ and }}}} for literal braces") from None
        unknown = [n for n in names if n not in PLACEHOLDERS]
        if unknown:
            raise ValueError(f"unknown placeholder {{{unknown[0]}}} in {part!r}; only "
                             + ", ".join(f"{{{n}}}" for n in PLACEHOLDERS) + " are known")
    return command


class _Evaluate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: list[str] = Field(min_length=1)
    timeout: float = 1800.0
    limits: ResourceLimits = Field(default_factory=ResourceLimits)
    quick: bool = False  # the evaluator has a cheaper mode when AVO_QUICK=1
    # evaluator: the whole command runs in the sandbox, its candidate processes beside it (and able
    # to reach it: its stdout through /proc). candidate: the evaluator runs outside, and starts each
    # candidate process through $AVO_CANDIDATE_PREFIX, in a sandbox of its own.
    isolation: Literal["evaluator", "candidate"] = "evaluator"

    _placeholders = field_validator("command")(_check_placeholders)

    @field_validator("timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)


class _Baselines(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: list[str] = Field(min_length=1)
    timeout: float = 3600.0

    _placeholders = field_validator("command")(_check_placeholders)

    @field_validator("timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)


class _Score(BaseModel):
    model_config = ConfigDict(extra="forbid")
    direction: Direction = "maximize"
    noise: NoiseSpec = Field(default_factory=NoiseSpec)
    tie_tolerance: float = Field(1e-9, ge=0.0, lt=0.1)
    precision: int | None = Field(None, ge=1, le=15)


class _Agent(BaseModel):
    model_config = ConfigDict(extra="forbid")
    goal: str = ""


class _Supervisor(BaseModel):
    model_config = ConfigDict(extra="forbid")
    stall_limit: int = Field(3, ge=1)


class TargetFile(BaseModel):
    """The schema of ``target.yaml``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    seed: str = "seed"
    knowledge_base: str | None = "kb"
    entrypoint: str
    evaluate: _Evaluate
    baselines: _Baselines | None = None
    score: _Score = Field(default_factory=_Score)
    agent: _Agent = Field(default_factory=_Agent)
    supervisor: _Supervisor = Field(default_factory=_Supervisor)
    requirements: list[str] = Field(default_factory=list)
    settings_env: list[str] = Field(default_factory=list)
    work_limits: WorkLimits = Field(default_factory=WorkLimits)
    resources: TargetResources = Field(default_factory=TargetResources)


def _format_errors(path: Path, exc: ValidationError) -> str:
    lines = [f"{path}: invalid target spec"]
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "(top level)"
        got = err.get("input")
        shown = f" (got {got!r})" if not isinstance(got, dict) and got is not None else ""
        if shown and repr(got) in err["msg"]:  # the message already quotes the input
            shown = ""
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "extra_forbidden":
            msg = "unknown field"
        lines.append(f"  field '{field}': {msg}{shown}")
    return "\n".join(lines)


def load_target_file(folder: Path) -> TargetFile:
    """Read and validate ``folder/target.yaml``; errors name the file and the field."""
    path = folder / SPEC_FILE
    try:
        st = path.stat()
    except OSError:
        spec = _parse_target_file(path)  # says what is wrong with it
    else:
        # One submit reads the file several times (the evaluator's tree, the job, the copy):
        # remembered by identity and change time, which a same-user process cannot set back.
        spec = _remembered(str(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    for field, rel in (("seed", spec.seed), ("knowledge_base", spec.knowledge_base)):
        if rel is not None and not (folder / rel).is_dir():
            raise SpecError(f"{path}: field '{field}': folder {folder / rel} does not exist")
    return spec.model_copy(deep=True)


@functools.lru_cache(maxsize=1)
def _remembered(path: str, _ino: int, _size: int, _mtime_ns: int, _ctime_ns: int) -> TargetFile:
    return _parse_target_file(Path(path))


def _parse_target_file(path: Path) -> TargetFile:
    import yaml

    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file; a directory target needs a {SPEC_FILE}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: expected a mapping of fields (name, entrypoint, evaluate, ...)")
    try:
        spec = TargetFile.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(_format_errors(path, exc)) from None
    return spec


def spec_from_folder(folder: Path) -> TargetSpec:
    """The :class:`TargetSpec` of a directory target."""
    folder = folder.resolve()
    tf = load_target_file(folder)
    return TargetSpec(
        name=tf.name,
        description=tf.description,
        entrypoint=tf.entrypoint,
        direction=tf.score.direction,
        goal=tf.agent.goal,
        eval_timeout=tf.evaluate.timeout,
        baseline_timeout=tf.baselines.timeout if tf.baselines else 3600.0,
        has_baselines=tf.baselines is not None,
        limits=tf.evaluate.limits,
        noise=tf.score.noise,
        stall_limit=tf.supervisor.stall_limit,
        tie_tolerance=tf.score.tie_tolerance,
        precision=tf.score.precision,
        has_quick=tf.evaluate.quick,
        requirements=tf.requirements,
        settings_env=tf.settings_env,
        work_limits=tf.work_limits,
        resources=tf.resources,
        directory=folder,
        evaluate_command=tf.evaluate.command,
        isolate_candidate=tf.evaluate.isolation == "candidate",
        baselines_command=tf.baselines.command if tf.baselines else None,
        provider="directory",
    )


def _folder(target: TargetSpec) -> tuple[Path, TargetFile]:
    # avo sends this plugin only the specs it announced or resolved, which all have a folder.
    assert target.directory is not None, f"target {target.name!r} is not a directory target"
    return target.directory, load_target_file(target.directory)


@hookimpl
def avo_targets() -> list[TargetSpec]:
    specs = []
    for entry in filter(None, os.environ.get(PATH_ENV, "").split(os.pathsep)):
        base = Path(entry)
        if (base / SPEC_FILE).is_file():
            folders = [base]
        else:
            folders = sorted(p for p in base.glob("*") if (p / SPEC_FILE).is_file())
        for folder in folders:
            try:
                specs.append(spec_from_folder(folder))
            except SpecError:
                continue  # reported when the target is used by path
    return specs


@hookimpl
def avo_resolve_target(ref: str) -> TargetSpec | None:
    folder = Path(ref).expanduser()
    if folder.is_dir() and (folder / SPEC_FILE).is_file():
        return spec_from_folder(folder)
    if folder.is_file() and folder.name == SPEC_FILE:
        return spec_from_folder(folder.parent)
    return None


@hookimpl
def avo_seed(target: TargetSpec, dest: Path) -> None:
    folder, tf = _folder(target)
    copy_contents(folder / tf.seed, dest)


@hookimpl
def avo_knowledge(target: TargetSpec, dest: Path) -> None:
    folder, tf = _folder(target)
    if tf.knowledge_base is not None:
        copy_contents(folder / tf.knowledge_base, dest)


@hookimpl
def avo_evaluate(target: TargetSpec, workdir: Path, options: EvalOptions) -> EvalResult:
    import tempfile

    from avo.evaluation import evaluate_dir

    log_dir = options.log_dir or Path(tempfile.mkdtemp(prefix="avo-eval-"))
    return evaluate_dir(target, workdir, log_dir / "directory-eval.log", quick=options.quick).result
