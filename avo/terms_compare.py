"""The terms a run started on (pinned by v0's commit) against run.json's terms now.

A later avo may add a field to a model (the target's spec, the run's options), so a run
recorded by an older one lacks it; such a field is passed over while it holds its default,
and one a later avo dropped is passed over too. Everything else is data and is compared
whole: a key added to or removed from a plain mapping (the target's recorded settings, the
hashes of the evaluator's files, the interpreter's start-up files) is a difference. Passing
those over let an agent write a thread count, or the hash of a planted ``.pth`` file, into
run.json and have it taken as what the run started with.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, TypeAdapter

# The shape of ``record_format.terms``: which parts are models, and ``hashes``, whose groups
# (evaluator, kb, runtime) were added over time while each group's file table is data.
_TERMS, _HASHES = "terms", "hashes"
Level = type[BaseModel] | str | None


def terms_differences(recorded: Any, current: Any) -> list[tuple[str, Any, Any]]:
    """``(where, now, then)`` for each value of ``current`` that is not what ``recorded`` holds."""
    return _walk(recorded, current, "", _TERMS)


def _walk(recorded: Any, current: Any, where: str, level: Level) -> list[tuple[str, Any, Any]]:
    if not (isinstance(recorded, dict) and isinstance(current, dict)) or level is None:
        return [] if recorded == current else [(where, current, recorded)]
    out = []
    for key in recorded.keys() | current.keys():
        path = f"{where}.{key}" if where else key
        if key in recorded and key in current:
            out += _walk(recorded[key], current[key], path, _inner(level, key))
        elif key in current and not _new_field_at_default(level, key, current[key]):
            out.append((path, current[key], None))
        elif key in recorded and level is _HASHES:
            out.append((path, None, recorded[key]))  # a group of hashes dropped from run.json
    return sorted(out, key=lambda d: d[0])


def restored_terms(recorded: Any, current: Any) -> Any:
    """``current`` with every value put back to what ``recorded`` holds (what ``avo recover``
    writes): a field a later avo added keeps its default, nothing else ``recorded`` lacks stays."""
    return _restore(recorded, current, _TERMS)


def _restore(recorded: Any, current: Any, level: Level) -> Any:
    if not (isinstance(recorded, dict) and isinstance(current, dict)) or level is None:
        return recorded
    out = {}
    for key in sorted(recorded.keys() | current.keys()):
        if key in recorded and key in current:
            out[key] = _restore(recorded[key], current[key], _inner(level, key))
        elif key in current:
            if _new_field_at_default(level, key, current[key]):
                out[key] = current[key]
            elif isinstance(level, type) and key in level.model_fields:
                out[key] = _default(level, key)  # a field a later avo added, set back to its default
        elif level is _HASHES or not isinstance(level, type) or key in level.model_fields:
            out[key] = recorded[key]  # (a field a later avo dropped stays dropped)
    return out


def _default(model: type[BaseModel], key: str) -> Any:
    field = model.model_fields[key]
    return TypeAdapter(field.annotation or Any).dump_python(field.get_default(call_default_factory=True), mode="json")


def _inner(level: Level, key: str) -> Level:
    """How the value under ``key`` is compared: as a model, as the hashes, or whole."""
    if level is _TERMS:
        from avo.models import TargetSpec
        from avo.state import RunOptions

        parts: dict[str, Level] = {"target": TargetSpec, "options": RunOptions, "hashes": _HASHES}
        return parts.get(key)
    if isinstance(level, type) and key in level.model_fields:
        annotation = level.model_fields[key].annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return annotation
    return None  # data (a mapping of settings, a table of file hashes): whole


def _new_field_at_default(level: Level, key: str, value: Any) -> bool:
    """``key`` is a field a later avo added to ``level``'s model, and holds its default."""
    if level is _HASHES:
        return True  # a group added later (the runtime's): compared from the next run on
    if not isinstance(level, type) or key not in level.model_fields:
        return False
    return bool(_default(level, key) == value)
