"""The terms a run started on against run.json's: what an upgrade may add, what an agent may not."""

from __future__ import annotations

import copy
from typing import Any

from avo.models import TargetSpec
from avo.state import RunOptions
from avo.terms_compare import restored_terms, terms_differences


def _terms() -> dict[str, Any]:
    return {"target": TargetSpec(name="t", entrypoint="x.py", settings_env=["T_THREADS"], settings={}
                                 ).model_dump(mode="json"),
            "options": RunOptions().model_dump(mode="json", exclude={"max_steps"}),
            "configs": ["a", "b"],
            "hashes": {"evaluator": {"eval.py": "1" * 64}, "kb": {}},
            "sandbox": "bwrap"}


def test_a_field_a_later_avo_added_is_passed_over_at_its_default() -> None:
    old = _terms()
    for field in ("settings_env", "settings", "precision"):  # what an older avo did not write
        del old["target"][field]
    old["target"]["settings_env"] = ["T_THREADS"]  # (this one it did, with a value)
    now = _terms()
    now["target"]["settings"] = None  # what run.json of such a run loads as
    assert terms_differences(old, now) == []
    now["target"]["settings"] = {}  # recorded as "all unset" after the start: not what the run had
    assert terms_differences(old, now) == [("target.settings", {}, None)]
    now["target"]["settings"] = None
    now["target"]["precision"] = 3  # a field the run lacks, not at its default
    assert terms_differences(old, now) == [("target.precision", 3, None)]
    assert restored_terms(old, now)["target"]["precision"] is None


def test_a_key_added_to_or_dropped_from_a_table_is_a_difference() -> None:
    old, now = _terms(), _terms()
    now["target"]["settings"] = {"T_THREADS": "2"}
    now["hashes"]["evaluator"]["json.py"] = "2" * 64
    del now["hashes"]["kb"]
    assert terms_differences(old, now) == [
        ("hashes.evaluator", now["hashes"]["evaluator"], old["hashes"]["evaluator"]),
        ("hashes.kb", None, {}),
        ("target.settings", {"T_THREADS": "2"}, {})]
    fixed = restored_terms(old, copy.deepcopy(now))
    assert fixed == old and terms_differences(old, fixed) == []


def test_a_hash_group_a_later_avo_added_is_kept_until_it_is_pinned() -> None:
    old, now = _terms(), _terms()
    now["hashes"]["runtime"] = {"site:x.pth": "3" * 64}  # the runtime group came after this run started
    assert terms_differences(old, now) == []
    assert restored_terms(old, now)["hashes"]["runtime"] == {"site:x.pth": "3" * 64}
    flipped = _terms()
    flipped["target"]["direction"] = "minimize"
    assert terms_differences(old, flipped) == [("target.direction", "minimize", "maximize")]
