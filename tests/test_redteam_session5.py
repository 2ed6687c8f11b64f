"""Red team of session 5's changes (snapshot trees from the index, packs read in-process, a
target's settings fixed at the start): each test is a hostile action by a same-user agent on a
real run, and what avo must do about it."""

from __future__ import annotations

from pathlib import Path

import pytest

from avo.engine import open_run, start_run, submit
from avo.errors import AvoError
from tests.test_record_integrity import edit_json
from tests.test_settings_pinned import dial  # noqa: F401  (the fixture)

# -- run.json's recorded settings edited by the agent ---------------------------------------------


@pytest.mark.parametrize(("started_with", "edited"), [(None, {"AVO_DIAL_BOOST": "1000"}),
                                                      ("-0.5", {}), ("-0.5", {"AVO_DIAL_BOOST": "1000"})])
def test_a_recorded_setting_added_or_dropped_in_run_json_is_refused(
        dial: Path, runs_root: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        started_with: str | None, edited: dict[str, str]) -> None:
    # The terms check compares only keys present on both sides (fields an upgrade adds or
    # drops); a setting is a key of `settings`, so adding one the run started without (or
    # dropping one it started with) passed it, and every evaluation got the agent's value.
    if started_with is not None:
        monkeypatch.setenv("AVO_DIAL_BOOST", started_with)
    run = start_run("dial", runs_root)
    monkeypatch.delenv("AVO_DIAL_BOOST", raising=False)
    edit_json(run.paths.run_json, lambda d: d["target"].__setitem__("settings", edited))
    (run.paths.work / "dial.txt").write_text("1.5\n")
    with pytest.raises(AvoError, match="settings"):
        submit(open_run(run.paths.root, runs_root), "dial 1.5")
