"""avo's session loop as MCP tools over stdio: ``python -m avo.mcp_server`` or ``avo mcp``.

Eleven tools, each a twin of a CLI command, let the coding agent the user already talks
to (Claude Code, Codex, ...) drive a run: list targets, start or resume a run, read the
variation prompt, evaluate, submit, revert, read status and lineage, answer the
supervisor, plot. Every tool calls the same engine functions as the CLI and returns the
same compact text; full logs stay on disk. A bad request becomes a tool error with a
clear message and the server keeps serving.

Run references an agent passes are confined to the runs directory (``--runs-dir``, else
``$AVO_RUNS_DIR``, else ``./runs`` of the server's working directory); a plot is written
only under a plain file name into the run's own folder (or its ``plots/``), never through a
link; a directory target inside the runs directory, or one taking an installed target's
name, is refused (the agent may have written it). The ``mcp`` SDK is imported only when the
server is built, so importing this module (or running ``avo --help``) stays cheap.
"""

from __future__ import annotations

import argparse
import functools
import io
import logging
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from avo import __version__
from avo.errors import AvoError, BlockedError

if TYPE_CHECKING:
    from avo.engine import Run

log = logging.getLogger("avo.mcp")

SERVER_NAME = "avo"

INSTRUCTIONS = """\
avo runs an evolutionary search whose variation operator is you, the coding agent.
The loop: avo_start_run (or resume one) -> avo_next_step (read the prompt) -> edit files
in the run's work/ folder -> avo_evaluate as often as useful -> avo_submit with a message
that says what changed and why -> repeat from avo_next_step. When avo_submit says the
supervisor is due: avo_supervisor_brief, answer it, avo_record_supervisor. Edit only
work/; never the evaluator, kb/ or the run's records. Keep NOTES.md in the run folder.
"""

_MCP_FOOTER = (
    "\n---\nVia MCP: evaluate with avo_evaluate (same as the avo-eval script), submit with "
    "avo_submit(message=..., run={run!r}), discard an experiment with avo_revert. The shell "
    "commands above are equivalents.\n"
)

# avo_plot's output: a plain file name (the characters of a metric name, no "..") and a
# format matplotlib writes, into the run's folder or this one folder of it.
PLOT_FOLDER = "plots"
PLOT_FORMATS = ("png", "svg", "pdf")
_PLOT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+=@,-]*$")
_PLOT_RULE = ("avo_plot writes only a plain file name ending in .png, .svg or .pdf (no '/' and no '..'), "
              f"into the run's folder, or {PLOT_FOLDER}/NAME into its {PLOT_FOLDER}/ folder; never into .avo/, "
              "another run, or outside the runs directory")

RunArg = Annotated[
    str | None,
    Field(description="Run id (or a path under the runs directory). Default: the newest run."),
]


class AvoTools:
    """The tools as plain methods: arguments in, compact text out, :class:`AvoError` on bad input.

    Nothing here imports the MCP SDK; :func:`build_server` wraps each method as a tool.
    """

    def __init__(self, runs_root: Path) -> None:
        self.runs_root = runs_root.expanduser().resolve()

    # -- confinement ---------------------------------------------------------------------

    def _inside(self, path: Path) -> bool:
        resolved = path.resolve()
        return resolved != self.runs_root and resolved.is_relative_to(self.runs_root)

    def _known_runs(self) -> str:
        from avo.state import list_runs

        ids = [p.root.name for p in list_runs(self.runs_root)][-5:]
        return ", ".join(ids) if ids else "none yet; start one with avo_start_run"

    def _run_dir(self, ref: str) -> Path:
        """The folder of run ``ref`` (an id or a path), refusing anything outside the runs dir."""
        ref = ref.strip()
        if not ref:
            raise AvoError("the run reference is empty; give a run id or leave it out for the newest run")
        path = Path(ref).expanduser()
        candidates = [path] if path.is_absolute() else [self.runs_root / path, Path.cwd() / path]
        inside = [c.resolve() for c in candidates if self._inside(c)]
        if not inside:
            raise AvoError(f"{ref!r} is outside the runs directory {self.runs_root}; this server only "
                           "opens runs under it (pass a run id)")
        for candidate in inside:
            if (candidate / "run.json").is_file():
                return candidate
        raise AvoError(f"no run {ref!r} in {self.runs_root} (newest runs: {self._known_runs()})")

    def _colony_dir(self, ref: str) -> Path | None:
        """The colony ``ref`` names, confined to the runs directory like a run."""
        from avo.colony import is_colony

        path = Path(ref.strip()).expanduser()
        candidates = [path] if path.is_absolute() else [self.runs_root / path, Path.cwd() / path]
        return next((c.resolve() for c in candidates if self._inside(c) and is_colony(c)), None)

    def _open(self, ref: str | None, *, check: bool = True) -> Run:
        """``check=False`` for a tool whose engine function checks the record under the lock."""
        from avo.engine import open_run

        return open_run(None if ref is None else self._run_dir(ref), self.runs_root, check=check)

    def _output_path(self, output: str | None, run: Run) -> tuple[Path, int]:
        """Where avo_plot writes ``output``, and how many folders above the file are the run's
        own (reached without following a link when the file is written:
        :func:`avo.regular_files.own_folder`).

        Only ``NAME.png|svg|pdf`` (in the run's folder) or ``plots/NAME.png|svg|pdf``: any other
        path the agent picks can name ``.avo/`` (a ref planted in the private backup), another
        run, or a folder it swaps for a link while the figure is drawn.
        """
        text = "trajectory.png" if output is None or not output.strip() else output.strip()
        folder, _, name = text.rpartition("/")
        if folder not in ("", PLOT_FOLDER) or not _PLOT_NAME.match(name) or ".." in name \
                or name.rpartition(".")[2].lower() not in PLOT_FORMATS:
            raise AvoError(f"output {output!r} is refused: {_PLOT_RULE}")
        return (run.paths.root / PLOT_FOLDER / name, 1) if folder else (run.paths.root / name, 0)

    def _target_ref(self, target: str) -> str:
        """What avo_start_run hands the engine for ``target``: an installed target's name as
        given, a directory target as its resolved folder (checked here, not looked up again
        through a path the agent can re-point).

        A directory target is refused inside the runs directory (the agent writes there, in
        work/, and would choose its own judge) and when its ``target.yaml`` takes the name of
        an installed target it is not (it would pass for that target in every view).
        """
        from avo.plugins import all_targets, find_target

        installed = all_targets()
        spec = find_target(target)
        if spec.directory is None:
            return target
        folder = spec.directory.resolve()
        places = [folder]
        if not any(s.name == target for s in installed):  # a path (a name is looked up before any path)
            places.append(Path(os.path.abspath(Path(target).expanduser())))  # a link in the runs dir, too
        if any(p == self.runs_root or p.is_relative_to(self.runs_root) for p in places):
            raise AvoError(f"target {target!r} is a folder inside the runs directory {self.runs_root}; over MCP "
                           "a directory target must live outside it (an agent can write there), so start an "
                           "installed target by name or a target folder the user made elsewhere")
        shadowed = [s for s in installed if s.name == spec.name
                    and (s.directory is None or s.directory.resolve() != folder)]
        if shadowed:
            raise AvoError(f"the target folder {folder} names itself {spec.name!r}, the name of an installed "
                           f"target ({shadowed[0].provider or 'a plugin'}); over MCP a directory target may not "
                           f"take an installed target's name: start {spec.name!r} by name, or rename the folder's "
                           "target in its target.yaml")
        return str(folder)

    def _check_can_step(self, run: Run) -> None:
        """The engine's check, with the MCP tools to call instead of the CLI commands it names."""
        from avo.engine import _check_can_step

        try:
            _check_can_step(run.state)
        except BlockedError as exc:
            hint = (f" Via MCP: avo_start_run(from_run={run.state.id!r})." if exc.reason == "budget"
                    else " Via MCP: call avo_supervisor_brief, answer it, then avo_record_supervisor.")
            raise BlockedError(f"{exc}{hint}") from None

    def _prompt(self, run: Run) -> str:
        from avo.prompts import variation_prompt

        return variation_prompt(run) + _MCP_FOOTER.format(run=run.state.id)

    # -- the tools -------------------------------------------------------------------------

    def list_targets(self) -> str:
        from avo.plugins import all_targets

        specs = all_targets()
        lines = [f"- {s.name} ({s.direction}; evolves {s.entrypoint}) — {s.description}" for s in specs]
        if not lines:
            lines = ["(no installed targets)"]
        lines.append("A folder with a target.yaml works too: avo_start_run(target='path/to/folder').")
        lines.append(f"Runs directory: {self.runs_root}")
        return "\n".join(lines)

    def start_run(
        self,
        target: Annotated[str | None, Field(
            description="Target name (from avo_list_targets) or a folder with target.yaml, outside the runs "
                        "directory and not named like an installed target. Starts a new run.")] = None,
        run: Annotated[str | None, Field(
            description="Id of an existing run to resume instead of starting one.")] = None,
        max_steps: Annotated[int | None, Field(ge=1, description="Step budget of a new run.")] = None,
        quick: Annotated[bool, Field(description="Use the target's cheap smoke evaluation.")] = False,
        stall_limit: Annotated[int | None, Field(
            ge=1, description="Steps without a new best before the supervisor is due (default: the target's).")] = None,
        from_run: Annotated[str | None, Field(
            description="Seed a new run from another run's best, or a version of it: RUN or RUN:vN.")] = None,
        executor: Annotated[str | None, Field(
            description="Where evaluations run: local (default, or $AVO_EXECUTOR) or an installed executor "
                        "such as ray.")] = None,
        executor_options: Annotated[dict[str, str] | None, Field(
            description="Executor options, e.g. {\"address\": \"ray://head:10001\"}.")] = None,
    ) -> str:
        """Start a run (``target`` and/or ``from_run``) or resume one (``run``).

        A directory target is refused when it lies inside the runs directory (a folder the
        agent wrote, in a run's work/ say) or when its target.yaml takes the name of an
        installed target that it is not; a directory target that starts is named as one in
        the reply, with the folder its evaluator is copied from.
        """
        from avo.engine import start_run

        if run is not None:
            if target is not None or from_run is not None:
                raise AvoError("give either run (to resume it) or target/from_run (to start a new run), not both")
            r = self._open(run)
            head = self.status(run=str(r.paths.root))
            try:
                self._check_can_step(r)
            except BlockedError as exc:
                return f"resumed {r.state.id}\n{head}\n\nblocked: {exc}"
            return f"resumed {r.state.id}\n{head}\n\n{self._prompt(r)}"
        if target is None and from_run is None:
            raise AvoError("give target (a name from avo_list_targets, or a folder with target.yaml) to start a "
                           "run, or run (an id) to resume one")
        source = None
        if from_run is not None:
            match = re.match(r"^(.*?)(:v\d+)?$", from_run.strip())
            assert match is not None  # the pattern matches every string
            source = str(self._run_dir(match.group(1))) + (match.group(2) or "")
        ref = None if target is None else self._target_ref(target)
        r = start_run(ref, self.runs_root, max_steps=max_steps, quick=quick, stall_limit=stall_limit,
                      from_ref=source, progress=lambda msg: log.info("%s", msg), executor=executor,
                      executor_options=executor_options)
        v0 = r.state.versions[0]
        from avo.prompts import fmt_number

        recorded = r.state.target  # as the run recorded it: what every later evaluation runs
        where = (f"\ntarget {recorded.name} is a directory target (not an installed plugin): its evaluator was "
                 f"copied from {recorded.directory}") if recorded.directory is not None else ""
        return (f"started {r.state.id}: x_0 = {fmt_number(v0.scalar)}; run folder {r.paths.root}{where}\n\n"
                + self._prompt(r))

    def next_step(self, run: RunArg = None) -> str:
        r = self._open(run)
        self._check_can_step(r)
        return self._prompt(r)

    def evaluate(
        self,
        run: RunArg = None,
        quick: Annotated[bool, Field(description=(
            "Screen in the target's cheap quick mode instead (recorded, never compared with the lineage)."))] = False,
        executor: Annotated[str | None, Field(
            description="Run this evaluation on another executor than the run's (e.g. local).")] = None,
        executor_options: Annotated[dict[str, str] | None, Field(description="Options of that executor.")] = None,
    ) -> str:
        from avo.engine import evaluate_work
        from avo.summaries import eval_lines

        r = self._open(run, check=False)
        return "\n".join(eval_lines(evaluate_work(r, quick=quick, executor=executor,
                                                 executor_options=executor_options), r))

    def submit(
        self,
        message: Annotated[str, Field(
            description="What changed and why, in one or two sentences; it becomes the commit message.")],
        run: RunArg = None,
    ) -> str:
        from avo.engine import submit
        from avo.summaries import submit_lines

        if not message.strip():
            raise AvoError("the message is empty; say what changed and why")
        from avo.migration import offer_if_due, offer_line

        r = self._open(run, check=False)
        lines = submit_lines(submit(r, message.strip()), r, via="mcp")
        came = offer_if_due(r)  # an island: the migrant its step count makes due
        if came is not None:
            r = self._open(str(r.paths.root))
            lines.append(offer_line(came, r))
        return "\n".join(lines)

    def revert(
        self,
        run: RunArg = None,
        message: Annotated[str | None, Field(
            description="Why the experiment is abandoned; recorded with its diff as an attempt.")] = None,
    ) -> str:
        from avo.engine import revert
        from avo.summaries import revert_line

        r = self._open(run, check=False)
        return revert_line(revert(r, message), r)

    def status(self, run: RunArg = None) -> str:
        from avo.summaries import status_dict, status_lines, work_dirty

        if run is not None and run.strip():
            colony = self._colony_dir(run)
            if colony is not None:  # every island side by side
                from avo.colony_view import status_lines as colony_lines

                return "\n".join(colony_lines(colony))
        r = self._open(run)
        lines = status_lines(status_dict(r, work_dirty(r)))
        lines.append(f"  run folder {r.paths.root} (edit only work/)")
        return "\n".join(lines)

    def lineage(
        self,
        run: RunArg = None,
        attempts: Annotated[bool, Field(
            description="List every attempt (accepted, match, rejected, failed, interrupted; reverted ones, "
                        "which use no step, as 'after step K') instead of accepted versions.")
        ] = False,
    ) -> str:
        from avo.numbers import display_digits
        from avo.prompts import lineage_table
        from avo.state import read_trajectory
        from avo.summaries import attempt_lines

        r = self._open(run)
        if attempts:
            return "\n".join(attempt_lines(read_trajectory(r.paths), display_digits(r.state))) or "no attempts yet"
        return lineage_table(r.state, rows=10**9)

    def supervisor_brief(self, run: RunArg = None) -> str:
        from avo.engine import write_brief

        r = self._open(run, check=False)
        path, text = write_brief(r)
        return (f"{text}\n---\n(brief saved to {path.relative_to(r.paths.root)}.) Via MCP: store your answer "
                f"with avo_record_supervisor(text=..., run={r.state.id!r}).\n")

    def record_supervisor(
        self,
        text: Annotated[str, Field(
            description="The redirect: 3-5 concrete, distinct directions, each with its first change and how "
                        "to tell whether it worked.")],
        run: RunArg = None,
    ) -> str:
        from avo.engine import record_redirect

        r = self._open(run, check=False)
        path = record_redirect(r, text)
        return (f"redirect recorded ({path.relative_to(r.paths.root)}); avo_next_step carries it for the "
                "next step")

    def plot(
        self,
        run: RunArg = None,
        output: Annotated[str | None, Field(
            description="Image file name (NAME.png, NAME.svg or NAME.pdf, no '/' or '..') written into the run "
                        "folder, or plots/NAME into its plots/ folder (default: trajectory.png).")] = None,
        x: Annotated[Literal["version", "time"], Field(
            description="The x axis: accepted version number (default) or wall-clock time.")] = "version",
        attempts: Annotated[bool, Field(description="Also mark every rejected or failed attempt.")] = False,
    ) -> str:
        """Draw the run's trajectory into ``output`` (a plain file name: :meth:`_output_path`).

        Written as :func:`avo.plot.plot_run` writes it, but with the folders below the run's
        root reached without following a link at the moment of the write: ``plots/`` swapped
        for a link while the figure is drawn is set aside and made again, not written through.
        """
        from avo.regular_files import write_json_atomic

        r = self._open(run)
        path, own = self._output_path(output, r)
        try:
            from avo.plot import build_figure
        except ModuleNotFoundError as exc:
            if exc.name == "avo.plot":
                raise AvoError("this avo has no plot module (avo.plot); update avo to plot runs") from None
            raise AvoError(f"plotting needs {exc.name}: pip install 'avo[plot]'") from None
        try:
            fig = build_figure(r, x=x, attempts=attempts)
        except ImportError:
            raise AvoError("plots need matplotlib: pip install 'avo[plot]'") from None
        buf = io.BytesIO()
        fig.savefig(buf, format=path.suffix.lower().lstrip("."), bbox_inches="tight")
        try:
            write_json_atomic(path, buf.getvalue(), sync="none", own=own)  # renamed in: a link at the name is replaced
        except OSError as exc:  # a folder at the name, say
            raise AvoError(f"cannot write the plot to {path}: {exc.strerror or exc}") from None
        return f"plot written to {path}"


# Each tool: (name, method name, when to call it, annotations).
TOOLS: list[tuple[str, str, str, dict[str, bool]]] = [
    ("avo_list_targets", "list_targets",
     "List the installed avo targets (name, direction, the file that is evolved). Call it first when you do not "
     "know which target to start; a folder with a target.yaml is also a valid target.",
     {"read_only_hint": True}),
    ("avo_start_run", "start_run",
     "Start a run on a target (seeds work/, copies the knowledge base, evaluates x_0, tags v0) and return the "
     "first variation prompt; or, with run=<id>, resume an existing run and return its status and next prompt. "
     "Call it once at the beginning of a session. Starting evaluates the seed, so it can take a while. A folder "
     "target must lie outside the runs directory and not take an installed target's name.",
     {"read_only_hint": False, "destructive_hint": False}),
    ("avo_next_step", "next_step",
     "Return the variation prompt for the next step: goal, rules, lineage table, recent rejected attempts, "
     "knowledge base index, NOTES.md and any supervisor redirect. Call it at the start of every step, after "
     "each avo_submit. It is refused while the supervisor is due.",
     {"read_only_hint": True}),
    ("avo_evaluate", "evaluate",
     "Score the current contents of work/ without changing the lineage (the same as running the run's avo-eval). "
     "Call it as often as useful while you edit, to check correctness and speed before you submit; "
     "quick=true screens cheaply in the target's quick mode when the target declares one (the prompt then "
     "offers it) and a full evaluation is slow.",
     {"read_only_hint": False, "destructive_hint": False, "idempotent_hint": True}),
    ("avo_submit", "submit",
     "Finish the step: avo evaluates work/ itself and commits it as a new version iff it passes the correctness "
     "gate and matches or beats the best; otherwise the diff is archived in rejected/ and work/ is reset to the "
     "best. Call it once per step when your change is ready, with a message that says what changed and why. "
     "The answer says whether the supervisor is due.",
     {"read_only_hint": False, "destructive_hint": True}),
    ("avo_revert", "revert",
     "Discard the uncommitted experiment in work/ (its diff is archived in rejected/) and go back to the best "
     "version. Call it when an idea is a dead end and you want a clean start without spending a submit.",
     {"read_only_hint": False, "destructive_hint": True, "idempotent_hint": True}),
    ("avo_status", "status",
     "Where the run stands: best version and score, steps and budget, steps since the last new best, "
     "supervisor state, whether work/ has uncommitted changes, and the run folder. Call it when resuming or "
     "when unsure what to do next. Given a colony (run='COLONY'), every island side by side; each island is a "
     "run of its own (run='COLONY/island-K').",
     {"read_only_hint": True}),
    ("avo_lineage", "lineage",
     "The lineage: every accepted version with its per-config scores (or, with attempts=true, every submitted "
     "step including rejected and failed ones). Call it to study what worked before choosing the next change; "
     "the code of each version is in work/'s git history (git show vN:FILE).",
     {"read_only_hint": True}),
    ("avo_supervisor_brief", "supervisor_brief",
     "Write and return the supervisor's review of the whole trajectory. Call it when avo_submit or avo_status "
     "says SUPERVISOR DUE (the search stalled or cycles); then answer the brief and store the answer with "
     "avo_record_supervisor.",
     {"read_only_hint": False, "destructive_hint": False}),
    ("avo_record_supervisor", "record_supervisor",
     "Store the supervisor's redirect (several concrete, distinct directions). It unblocks the run and rides "
     "on the next variation prompt as a strong prior for one step. Call it right after answering "
     "avo_supervisor_brief, then continue with avo_next_step.",
     {"read_only_hint": False, "destructive_hint": False}),
    ("avo_plot", "plot",
     "Draw the run's progress (running best per version, per-config curves, baselines) into an image file in "
     "the run folder (a plain file name, or plots/NAME) and return its path. Call it when the user wants to see "
     "progress.",
     {"read_only_hint": False, "destructive_hint": False, "idempotent_hint": True}),
]


def _as_tool(method: Callable[..., str], tool_error: type[Exception]) -> Callable[..., str]:
    """Turn avo's errors into tool errors with their message; never let a call crash the server."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> str:
        try:
            return method(*args, **kwargs)
        except BlockedError as exc:
            raise tool_error(f"blocked: {exc}") from None
        except AvoError as exc:
            raise tool_error(str(exc)) from None
        except Exception as exc:
            log.exception("%s failed", method.__name__)
            raise tool_error(f"internal error ({type(exc).__name__}: {exc}); the server keeps running and "
                             "logged the traceback on its stderr") from None

    return call


def build_server(runs_root: Path) -> Any:
    """The MCP server with the eleven tools, serving runs under ``runs_root``."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
        from mcp.types import ToolAnnotations
    except ImportError as exc:
        raise AvoError(f"the MCP server needs the mcp SDK 2.x ({exc}): pip install 'mcp>=2'") from None

    tools = AvoTools(runs_root)
    server = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, version=__version__)
    for name, attr, description, hints in TOOLS:
        server.add_tool(_as_tool(getattr(tools, attr), ToolError), name=name, description=description,
                        annotations=ToolAnnotations.model_validate({**hints, "open_world_hint": False}, by_name=True),
                        structured_output=False)
    return server


def serve(runs_root: Path) -> None:
    """Serve the tools over stdio until the client closes the connection."""
    server = build_server(runs_root)
    log.info("avo MCP server %s serving runs in %s", __version__, runs_root.resolve())
    server.run("stdio")


def main(argv: list[str] | None = None) -> None:
    """``python -m avo.mcp_server [--runs-dir DIR]``."""
    from avo.state import runs_dir

    parser = argparse.ArgumentParser(
        prog="python -m avo.mcp_server",
        description="Serve avo's session loop as MCP tools over stdio (for Claude Code, Codex, ...).",
    )
    parser.add_argument("--runs-dir", type=Path, default=None,
                        help="Where runs live (default: $AVO_RUNS_DIR, else ./runs of the working directory).")
    args = parser.parse_args(argv)
    try:
        serve(runs_dir(args.runs_dir))
    except AvoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
