"""Noise-aware acceptance: a gain inside the band must survive interleaved re-measurement."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from avo.engine import start_run, submit
from avo.policy import confirm, first_look
from avo.prompts import variation_prompt
from avo.state import read_trajectory

EVALUATOR = textwrap.dedent(
    """
    import json, os, random, runpy, sys
    from pathlib import Path
    workdir = Path(sys.argv[1])
    ns = runpy.run_path(str(workdir / "model.py"))
    counter = Path(os.environ["NOISE_COUNTER"])
    i = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(i + 1))
    noise = random.Random(i).uniform(-0.03, 0.03)   # ±3 % measurement noise
    true = 100.0 * ns["QUALITY"]
    seen = Path(os.environ["NOISE_COUNTER"] + "." + str(ns.get("SEED")))  # looks at this model so far
    looks = int(seen.read_text()) if seen.exists() else 0
    seen.write_text(str(looks + 1))
    if ns.get("LUCKY") and looks == 0:
        noise = 0.30   # its first draw ran while the machine slowed the other side
    if ns.get("FLAKY") and looks == 1:
        print(json.dumps({"correct": False, "error": "wrong answer on the second look"}))
        sys.exit(0)
    print(json.dumps({"correct": True, "metrics": {"speed": true * (1 + noise)}}))
    """
)


@pytest.fixture
def noisy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    target = tmp_path / "noisy"
    (target / "seed").mkdir(parents=True)
    (target / "seed" / "model.py").write_text("QUALITY = 1.0\nSEED = 42\n")
    (target / "eval.py").write_text(EVALUATOR)
    (target / "target.yaml").write_text(textwrap.dedent(
        """
        name: noisy
        entrypoint: model.py
        knowledge_base: null
        evaluate:
          command: ["{python}", "{target}/eval.py", "{workdir}"]
          timeout: 30s
        score:
          noise: {band: 0.05, confirm_runs: 5}
        """))
    monkeypatch.setenv("NOISE_COUNTER", str(tmp_path / "counter"))
    # This evaluator keeps a call counter outside the candidate's folder (a stand-in for a
    # noisy machine); the sandbox rightly forbids that, so these runs choose no sandbox.
    monkeypatch.setenv("AVO_SANDBOX", "none")
    return target


def set_model(work: Path, quality: float, seed: int = 42, extra: str = "") -> None:
    (work / "model.py").write_text(f"QUALITY = {quality}\nSEED = {seed}\n{extra}")


def test_a_seed_change_that_is_only_noise_does_not_enter_the_lineage(
    noisy: Path, runs_root: Path, core_plugins: None
) -> None:
    run = start_run(str(noisy), runs_root, stall_limit=10)
    for seed in (137, 7, 2024, 99):
        set_model(run.paths.work, 1.0, seed)
        out = submit(run, f"seed {seed}")
        assert out.outcome == "rejected", out.reason
        assert "inside the noise band" in out.reason
    confirms = [r["confirm"] for r in read_trajectory(run.paths) if r.get("kind") == "submit"]
    assert all(len(c["candidate"]) == 6 and len(c["best"]) == 5 for c in confirms)
    assert len(run.state.versions) == 1


def test_a_real_gain_inside_the_band_is_confirmed(noisy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(noisy), runs_root)
    set_model(run.paths.work, 1.045)
    out = submit(run, "4.5 % better")
    assert out.outcome == "accepted" and out.version is not None and out.version.new_best
    assert "confirmed" in out.reason
    assert out.version.scalar == pytest.approx(104.5, rel=0.03)  # the median, not the first draw


def test_an_evolve_step_reports_the_gain_its_decision_stood_on(noisy: Path, runs_root: Path, core_plugins: None,
                                                               tmp_path: Path) -> None:
    # A confirmed step's scalar is the candidate's median; the gain printed beside it was once its
    # first draw against the best's record ("accepted (new best) scalar 1,386.0 (-2.7%)" in a
    # quick game2048 run, whose reason said +37.23 % on the medians).
    import io
    import sys

    from avo.contract import gain
    from avo.dashboard import PlainReporter
    from avo.evolve import EvolveConfig, evolve

    run = start_run(str(noisy), runs_root)
    agent = tmp_path / "agent.py"
    agent.write_text("import os, pathlib\n(pathlib.Path(os.environ['AVO_WORK_DIR']) / 'model.py')"
                     ".write_text('QUALITY = 1.045\\nSEED = 42\\n')\nprint('4.5 % better')\n")
    buf = io.StringIO()
    evolve(run, EvolveConfig(backend="mock", max_steps=1, options={"command": f"{sys.executable} {agent}"}),
           PlainReporter(buf))
    record = next(r for r in read_trajectory(run.paths) if r.get("kind") == "submit")
    assert record["outcome"] == "accepted" and "confirmed" in record["reason"]
    import statistics
    decided = gain(statistics.median(record["confirm"]["candidate"]), statistics.median(record["confirm"]["best"]),
                   "maximize")
    line = next(x for x in buf.getvalue().splitlines() if "step 1: accepted" in x)
    assert f"({decided:+.1%})" in line and f"{decided:+.2%}" in record["reason"], (line, record["reason"])


def test_clear_gains_and_losses_are_decided_without_the_interleaved_confirmation(
        noisy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(noisy), runs_root)
    set_model(run.paths.work, 1.2)
    out = submit(run, "20 % better")
    record = read_trajectory(run.paths)[-1]
    assert out.outcome == "accepted" and "confirm" not in record
    # A gain beyond the band is looked at twice, and the lower of the two draws is recorded.
    first, second = record["recheck"]["scalars"]
    assert out.version is not None and out.version.scalar == min(first, second) == record["scalar"]
    assert "measured twice" in out.reason
    set_model(run.paths.work, 0.8)
    out = submit(run, "much worse")
    assert out.outcome == "rejected" and "recheck" not in read_trajectory(run.paths)[-1]


def test_one_lucky_draw_beyond_the_band_does_not_enter_the_lineage(
        noisy: Path, runs_root: Path, core_plugins: None) -> None:
    # Round four's 2-thread attention_c step 1 was accepted at +40 % on one evaluation while
    # the load slowed the reference; re-measured, it was 27.6 % lower. Here: a change that is
    # no change, whose first draw reads 30 % high.
    run = start_run(str(noisy), runs_root, stall_limit=10)
    set_model(run.paths.work, 1.0, 7, "LUCKY = True\n")
    out = submit(run, "a lucky draw")
    assert out.outcome == "rejected", out.reason
    assert "inside the noise band" in out.reason
    record = read_trajectory(run.paths)[-1]
    assert record["recheck"]["scalars"][0] == pytest.approx(130.0)
    assert record["confirm"]["candidate"][:2] == record["recheck"]["scalars"]  # both draws count there
    assert len(run.state.versions) == 1


def test_a_candidate_that_fails_its_second_look_is_rejected(noisy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(noisy), runs_root)
    set_model(run.paths.work, 1.3, 8, "FLAKY = True\n")
    out = submit(run, "right once")
    assert out.outcome == "rejected"
    assert "measured again" in out.reason and "wrong answer on the second look" in out.reason
    assert read_trajectory(run.paths)[-1]["recheck"]["error"] == "wrong answer on the second look"
    assert len(run.state.versions) == 1


def test_a_target_can_take_gains_beyond_the_band_on_one_look(noisy: Path, runs_root: Path, core_plugins: None) -> None:
    spec = noisy / "target.yaml"
    spec.write_text(spec.read_text().replace("confirm_runs: 5}", "confirm_runs: 5, recheck_gains: false}"))
    run = start_run(str(noisy), runs_root)
    set_model(run.paths.work, 1.0, 7, "LUCKY = True\n")
    out = submit(run, "a lucky draw, taken")
    assert out.outcome == "accepted" and out.version is not None
    assert out.version.scalar == pytest.approx(130.0)
    assert "recheck" not in read_trajectory(run.paths)[-1]


def test_policy_rules() -> None:
    assert first_look(100, 100, "maximize", 0.0) == "accept"  # matches-or-improves
    assert first_look(99.9, 100, "maximize", 0.0) == "reject"
    assert first_look(90, 100, "minimize", 0.0) == "accept"
    assert first_look(102, 100, "maximize", 0.05) == "confirm"
    assert first_look(106, 100, "maximize", 0.05) == "accept"
    assert first_look(94, 100, "maximize", 0.05) == "reject"
    assert confirm([104, 105, 103], [100, 101, 99], "maximize", 0.05).accepted
    assert not confirm([101, 100, 102], [100, 101, 99], "maximize", 0.05).accepted
    assert confirm([96, 95, 97], [100, 101, 99], "minimize", 0.05).accepted


def test_remeasurements_of_the_best_become_its_reference(noisy: Path, runs_root: Path, core_plugins: None) -> None:
    """A best recorded on a lucky draw is compared through its later re-measurements."""
    run = start_run(str(noisy), runs_root, stall_limit=10)
    set_model(run.paths.work, 1.0, 137)
    out = submit(run, "noise only", progress=lambda line: None)
    assert out.outcome == "rejected" and "inside the noise band" in out.reason
    from avo.engine import open_run

    state = open_run(run.paths.root, runs_root).state
    assert len(state.remeasured[0]) == 5  # kept for the next comparison


def test_a_tree_that_scores_differently_on_a_noiseless_target_is_flagged(
    noisy: Path, runs_root: Path, core_plugins: None
) -> None:
    spec = noisy / "target.yaml"
    spec.write_text(spec.read_text().replace("noise: {band: 0.05, confirm_runs: 5}", "direction: maximize"))
    run = start_run(str(noisy), runs_root)
    set_model(run.paths.work, 1.2)
    from avo.engine import evaluate_work

    assert evaluate_work(run).warning is None
    second = evaluate_work(run)
    assert second.warning is not None and "not deterministic" in second.warning
    out = submit(run, "same tree a third time")
    assert any("not deterministic" in note for note in out.notes)



def test_the_prompt_tells_the_agent_how_noise_is_handled(noisy: Path, toy: Path, runs_root: Path,
                                                         core_plugins: None) -> None:
    prompt = variation_prompt(start_run(str(noisy), runs_root))
    assert "One measurement varies by about ±5% here: a gain inside that band is\n   re-measured 5× beside v0" in prompt
    assert "measured a second time and recorded at the lower draw" in prompt
    assert "varies by about" not in variation_prompt(start_run(str(toy), runs_root))  # no band: no rule


BANKS = textwrap.dedent(
    """
    import json, os, random, runpy, sys
    from pathlib import Path
    workdir = Path(sys.argv[1])
    ns = runpy.run_path(str(workdir / "model.py"))
    counter = Path(os.environ["NOISE_COUNTER"])
    i = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(i + 1))
    if ns.get("TAMPER") == i:   # the operator edits the installed evaluator during this draw
        with open(os.environ["BANKS_TARGET"] + "/eval.py", "a") as fh:
            fh.write("# edited during a submit\\n")
    draw = random.Random(i)
    true = 100.0 * ns["QUALITY"]
    banks = {f"bank{k}": true * (1 + draw.uniform(-0.01, 0.01) * ns.get("NOISY", 1)) for k in (1, 2, 3)}
    print(json.dumps({"correct": True, "metrics": banks, "notes": f"draw {i}"}))
    """
)


def banks_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, confirm_runs: int) -> Path:
    """A noisy target with three banks (game2048's shape): the scalar is their geometric mean."""
    target = tmp_path / "banks"
    (target / "seed").mkdir(parents=True)
    (target / "seed" / "model.py").write_text("QUALITY = 1.0\n")
    (target / "eval.py").write_text(BANKS)
    (target / "target.yaml").write_text(textwrap.dedent(
        f"""
        name: banks
        entrypoint: model.py
        knowledge_base: null
        evaluate:
          command: ["{{python}}", "{{target}}/eval.py", "{{workdir}}"]
          timeout: 30s
        score:
          noise: {{band: 0.08, confirm_runs: {confirm_runs}}}
        """))
    monkeypatch.setenv("NOISE_COUNTER", str(tmp_path / "counter"))
    monkeypatch.setenv("BANKS_TARGET", str(target))
    monkeypatch.setenv("AVO_SANDBOX", "none")  # the evaluator keeps a counter outside the candidate
    return target


@pytest.mark.parametrize("confirm_runs", [3, 4])  # four candidate draws (a median between two), five
def test_a_confirmed_version_records_the_metrics_of_its_median(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs_root: Path, core_plugins: None,
        confirm_runs: int) -> None:
    # v1 of game2048 run 2 recorded the median 59,492 as its scalar but the banks of its first
    # draw (57,840): `avo log`, the plot's bank panels and the report disagreed with the scalar.
    import statistics

    from avo.contract import geometric_mean
    from avo.engine import open_run

    run = start_run(str(banks_target(tmp_path, monkeypatch, confirm_runs)), runs_root)
    set_model(run.paths.work, 1.05)
    out = submit(run, "5 % better")
    assert out.outcome == "accepted" and out.version is not None and "confirmed" in out.reason
    v1 = out.version
    record = next(r for r in read_trajectory(run.paths) if r.get("kind") == "submit")
    draws = record["confirm"]["candidate_draws"]
    assert len(draws) == confirm_runs + 1 and [d["scalar"] for d in draws] == record["confirm"]["candidate"]
    assert v1.scalar == statistics.median(d["scalar"] for d in draws)
    assert geometric_mean(v1.metrics.values()) == pytest.approx(v1.scalar, rel=1e-12)
    assert record["metrics"] == v1.metrics and record["notes"] == v1.notes
    if confirm_runs % 2 == 0:  # an odd count of draws: the median is one of them, with its own figures
        middle = next(d for d in draws if d["scalar"] == v1.scalar)
        assert v1.metrics == middle["metrics"] and v1.notes == middle["notes"]
    else:
        ranked = sorted(draws, key=lambda d: d["scalar"])[1:3]
        assert v1.notes == " | ".join(d["notes"] for d in ranked)
        for bank, value in v1.metrics.items():
            assert min(d["metrics"][bank] for d in ranked) <= value <= max(d["metrics"][bank] for d in ranked)
    assert draws[0]["metrics"] != v1.metrics  # not the first draw's
    # Every draw keeps its own notes, metrics and log, the best's too.
    assert [d["label"] for d in draws] == ["step1", *(f"confirm{i}-cand" for i in range(confirm_runs))]
    assert [d["label"] for d in record["confirm"]["best_draws"]] == [f"confirm{i}-best" for i in range(confirm_runs)]
    assert all(d["notes"].startswith("draw ") and (run.paths.logs / d["log"]).is_file()
               for d in [*draws, *record["confirm"]["best_draws"]])
    # The commit, the score file and every view carry the same figures (the record check agrees).
    state = open_run(run.paths.root, runs_root).state
    assert state.versions[1].metrics == v1.metrics
    # The submit's summary compares per config what the decision compared: both sides' medians,
    # not the first draw against the best's record.
    from avo.contract import gain
    from avo.prompts import fmt_pct
    from avo.summaries import submit_lines

    lines = submit_lines(out, run)
    header = (f"per config, the median of {confirm_runs + 1} draws of this candidate vs the median of "
              f"{confirm_runs} draws of v0, interleaved:")
    assert header in lines and not any("this evaluation vs" in line for line in lines)
    assert out.medians is not None and out.medians.candidate == v1.metrics
    best_draws = record["confirm"]["best_draws"]
    assert out.medians.best != state.versions[0].metrics  # the best's median here, not its recorded first draw
    shown = lines[lines.index(header) + 1:lines.index(header) + 1 + len(v1.metrics)]
    for line, (bank, value) in zip(shown, v1.metrics.items(), strict=True):
        assert line.split()[0] == bank
        assert line.endswith(f"({fmt_pct(gain(value, out.medians.best[bank], 'maximize'))})")
    for bank, value in out.medians.best.items():  # between the best's middle draws (an even or odd count)
        ranked = sorted(best_draws, key=lambda d: d["scalar"])
        middle = ranked[(len(ranked) - 1) // 2:len(ranked) // 2 + 1]
        assert min(d["metrics"][bank] for d in middle) <= value <= max(d["metrics"][bank] for d in middle)


def test_a_submit_stopped_by_a_changed_evaluator_uses_its_step_and_keeps_its_draws(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs_root: Path, core_plugins: None) -> None:
    # An edit of the installed evaluator during a confirmation rightly refuses the next draw; the
    # submit recorded nothing, its first draw and the finished pair only in logs/ (game2048 run 3).
    # Then (until 2026-12-06) an attempt that used no step: an agent that touched the evaluator
    # whenever a first draw disappointed, and put it back, drew again for free.
    from typer.testing import CliRunner

    from avo.cli.app import app
    from avo.engine import evaluate_work, open_run
    from avo.errors import IntegrityError
    from avo.prompts import supervisor_brief
    from avo.report import build_report

    run = start_run(str(banks_target(tmp_path, monkeypatch, 3)), runs_root)
    drawn = int((tmp_path / "counter").read_text())  # the index of the submit's first draw
    # step1 = drawn, confirm0-best = drawn + 1, confirm0-cand = drawn + 2 edits the evaluator.
    set_model(run.paths.work, 1.02, extra=f"NOISY = 0\nTAMPER = {drawn + 2}\n")
    with pytest.raises(IntegrityError, match="the evaluator changed") as refused:
        submit(run, "2 % better")
    assert "step 1 is recorded as interrupted, with the 3 draw(s) it had" in str(refused.value)
    record = read_trajectory(run.paths)[-1]
    assert record["kind"] == "submit" and record["outcome"] == "interrupted"
    assert record["step"] == 1 and record["message"] == "2 % better" and record["scalar"] is None
    assert "the evaluator changed" in record["error"]
    assert [d["label"] for d in record["draws"]] == ["step1", "confirm0-best", "confirm0-cand"]
    assert [d["notes"] for d in record["draws"]] == [f"draw {drawn + k}" for k in range(3)]
    assert all(d["scalar"] is not None and d["metrics"] for d in record["draws"])
    assert "+TAMPER" in (run.paths.root / record["diff"]).read_text()
    # A step used, no decision; work/ keeps the candidate.
    state = open_run(run.paths.root, runs_root).state
    # (its finished draw of v0 counts: a kill must not choose which draws of the best count)
    assert state.steps == 1 and len(state.versions) == 1 and state.remeasured == {0: [record["draws"][1]["scalar"]]}
    assert state.failures_in_row == 0 and state.steps_since_best == 1
    assert "QUALITY = 1.02" in (run.paths.work / "model.py").read_text()
    lines = CliRunner().invoke(app, ["log", "--attempts", "--run", str(run.paths.root)]).output.splitlines()
    assert lines[0].startswith("step   1 interrupted      its evaluation stopped: ") and "2 % better" in lines[0]
    opened = open_run(run.paths.root, runs_root)
    assert "| 1 | interrupted | — | its evaluation stopped: " in supervisor_brief(opened)
    page = build_report(opened, plot=False)
    assert "step 1 interrupted</h3>" in page
    best = record["draws"][1]["scalar"]  # v0 draws with noise; the candidate (NOISY = 0) scores 102 exactly
    assert f"measured before it was interrupted: step1 102.0, confirm0-best {best:.1f}, confirm0-cand 102.0" in page
    # The refusal stands: nothing more is evaluated in this run.
    with pytest.raises(IntegrityError, match="evaluator changed"):
        evaluate_work(open_run(run.paths.root, runs_root))
    assert read_trajectory(run.paths)[-1] == record


def test_the_seeds_own_code_scoring_differently_is_flagged(noisy: Path, runs_root: Path,
                                                          core_plugins: None) -> None:
    # The seed's record named its tree before work/.avo/scores.jsonl existed, so evaluating the
    # unchanged work/ again never met it: now both name the code alone.
    from avo.engine import evaluate_work

    spec = noisy / "target.yaml"
    spec.write_text(spec.read_text().replace("noise: {band: 0.05, confirm_runs: 5}", "direction: maximize"))
    run = start_run(str(noisy), runs_root)
    report = evaluate_work(run)
    assert report.warning is not None and "in seed" in report.warning and "not deterministic" in report.warning


def test_metrics_at_a_median_between_two_draws(tmp_path: Path) -> None:
    from avo.contract import geometric_mean, scalar_of
    from avo.draws import at_median
    from avo.evaluation import Evaluation
    from avo.models import EvalResult

    def draw(metrics: dict[str, float], primary: float | None = None, notes: str | None = None) -> Evaluation:
        result = EvalResult(correct=True, metrics=metrics, primary=primary, notes=notes)
        return Evaluation(result, scalar_of(result)[0], 1.0, tmp_path / "x.log")

    # Four draws: the median is the mean of the middle two; the geometric mean of the metrics is it.
    draws = [draw({"a": 10, "b": 40}, notes="n1"), draw({"a": 30, "b": 30}, notes="n2"),
             draw({"a": 50, "b": 20}, notes="n3"), draw({"a": 90, "b": 90}, notes="n4")]
    metrics, notes = at_median(draws)  # scalars 20, 30, 31.6, 90
    assert geometric_mean(metrics.values()) == pytest.approx((30 + 1000 ** 0.5) / 2, rel=1e-12)
    assert 30 <= metrics["a"] <= 50 and 20 <= metrics["b"] <= 30 and notes == "n2 | n3"
    # A target's own scalar (primary): the metrics halfway, as the median is.
    metrics, _ = at_median([draw({"a": 1.0}, primary=2.0), draw({"a": 3.0}, primary=4.0)])
    assert metrics == {"a": 2.0}
    # An odd count: the middle draw's own figures.
    assert at_median(draws[:3]) == ({"a": 30, "b": 30}, "n2")
