"""``avo recover``: rebuild a run's record from what was actually committed."""

from __future__ import annotations

import typer

from avo.cli.common import JsonFlag, RunRef, RunsDir, print_json, runs_root, say, user_errors


def register(app: typer.Typer) -> None:
    @app.command()
    def recover(run: RunRef = None, runs_dir: RunsDir = None, json_out: JsonFlag = False) -> None:
        """Rebuild run.json's versions and best from avo's private backup; re-link the trajectory.

        For a record that avo refuses because it disagrees with the lineage (an edited
        run.json or trajectory.jsonl). No trajectory line is deleted: broken ones are named
        in a `recovered` record and flagged from then on.
        """
        from avo.engine import open_run
        from avo.recovery import restore_record

        with user_errors(json_out):
            r = open_run(run, runs_root(runs_dir), check=False)
            notes = restore_record(r)
            best = r.state.best_version
            if json_out:
                print_json({"run": r.state.id, "notes": notes, "versions": len(r.state.versions),
                            "best": f"v{best.n}", "best_scalar": best.scalar})
                return
            for line in notes:
                say(f"- {line}")
            say(f"recovered {r.state.id}: {len(r.state.versions)} versions, best v{best.n} = {best.scalar!r}", err=True)
