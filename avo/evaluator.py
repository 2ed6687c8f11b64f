"""Child-process entry for plugin targets, started from the run's private evaluator copy.

``python -I -c <boot> --module PKG --plugin NAME --spec FILE [--workdir DIR] [--baselines]
[--quick] --result-fd N`` imports only the target's own plugin module (no other plugin can
answer for it), runs ``avo_evaluate`` (or ``avo_baselines``) and sends the contract as one
JSON line on the private pipe ``N``, then ends with ``os._exit`` so that nothing (an
``atexit`` handler, a finaliser) runs after the result. Its stdout and stderr are only logs.
Never imported by the process that holds the run state.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import traceback
from pathlib import Path

from avo.errors import AvoError
from avo.eval_env import EVAL_SECRET, LOG_DIR
from avo.models import EvalOptions, TargetSpec


def _send(fd: int, line: str) -> None:
    data = (line + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def _evaluate(args: argparse.Namespace) -> str:
    from avo.plugins import call_module_hook

    spec = TargetSpec.model_validate_json(Path(args.spec).read_text())
    module = importlib.import_module(args.module)
    where = {"plugin": args.plugin, "distribution": args.distribution}
    log_dir = os.environ.get(LOG_DIR)
    options = EvalOptions(quick=args.quick, log_dir=Path(log_dir) if log_dir else None,
                          secret=os.environ.pop(EVAL_SECRET, None) or None)
    if args.baselines:
        from avo.evaluation import baselines_payload

        results = call_module_hook(module, "avo_baselines", target=spec, options=options, **where)
        return baselines_payload(results or {})
    if args.workdir is None:
        raise ValueError("--workdir is required unless --baselines")
    result = call_module_hook(module, "avo_evaluate", target=spec, workdir=Path(args.workdir).resolve(),
                              options=options, **where)
    return str(result.model_dump_json(exclude_none=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="avo.evaluator")
    parser.add_argument("--module", required=True)
    parser.add_argument("--plugin", required=True)
    parser.add_argument("--spec", required=True)
    parser.add_argument("--distribution", default="?")
    parser.add_argument("--workdir")
    parser.add_argument("--baselines", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--result-fd", type=int, required=True)
    args = parser.parse_args(argv if argv is not None else sys.argv[1:])
    fd = args.result_fd
    # Whatever the target starts (a player, a kernel worker) must not inherit the channel.
    os.set_inheritable(fd, False)
    try:
        line = _evaluate(args)
        code = 0
    except AvoError as exc:  # a PluginError names the plugin and what it did (raised, returned the wrong type)
        traceback.print_exc()
        line = json.dumps({"correct": False, "metrics": {}, "error": str(exc)})
        code = 1
    except Exception as exc:
        traceback.print_exc()
        line = json.dumps({"correct": False, "metrics": {},
                           "error": f"the evaluator raised {type(exc).__name__}: {exc}"})
        code = 1
    _send(fd, line)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
