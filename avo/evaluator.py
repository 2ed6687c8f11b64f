"""Child-process entry for plugin targets: ``python -m avo.evaluator --target NAME ...``.

Runs ``avo_evaluate`` (or ``avo_baselines``) of the target's plugin and prints the contract
as the last line of stdout. Never imported by the process that holds the run state.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

from avo.errors import AvoError
from avo.evaluation import baselines_payload
from avo.models import EvalOptions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m avo.evaluator")
    parser.add_argument("--target", required=True)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--baselines", action="store_true")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)

    from avo.plugins import PluginError, call_target_hook, find_target

    log_dir = os.environ.get("AVO_LOG_DIR")
    options = EvalOptions(quick=args.quick, log_dir=Path(log_dir) if log_dir else None)
    try:
        spec = find_target(args.target)
        if args.baselines:
            results = call_target_hook(spec, "avo_baselines", options=options)
            print(baselines_payload(results or {}), flush=True)
            return 0
        if args.workdir is None:
            parser.error("--workdir is required unless --baselines")
        result = call_target_hook(spec, "avo_evaluate", workdir=args.workdir.resolve(), options=options)
        print(result.model_dump_json(exclude_none=True), flush=True)
        return 0
    except AvoError as exc:  # a PluginError names the plugin and what it did (raised, returned the wrong type)
        traceback.print_exc()
        error = str(exc) if isinstance(exc, PluginError) else f"the evaluator failed: {exc}"
        print(json.dumps({"correct": False, "metrics": {}, "error": error}), flush=True)
        return 1
    except Exception as exc:
        traceback.print_exc()
        print(json.dumps({"correct": False, "metrics": {},
                          "error": f"the evaluator raised {type(exc).__name__}: {exc}"}), flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
