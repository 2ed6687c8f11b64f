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
from typing import Any

from avo.models import EvalOptions, EvalResult, TargetSpec


def _send(fd: int, line: str) -> None:
    data = (line + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def _evaluate(args: argparse.Namespace) -> str:
    import pluggy

    from avo import hookspecs

    spec = TargetSpec.model_validate_json(Path(args.spec).read_text())
    module = importlib.import_module(args.module)
    pm = pluggy.PluginManager("avo")
    pm.add_hookspecs(hookspecs)
    pm.register(module, name=args.plugin)
    log_dir = os.environ.get("AVO_LOG_DIR")
    options = EvalOptions(quick=args.quick, log_dir=Path(log_dir) if log_dir else None,
                          secret=os.environ.pop("AVO_EVAL_SECRET", None) or None)
    if args.baselines:
        from avo.evaluation import baselines_payload

        results = pm.hook.avo_baselines(target=spec, options=options) or {}
        return baselines_payload({k: _validated(v, f"avo_baselines()[{k!r}]") for k, v in results.items()})
    if args.workdir is None:
        raise ValueError("--workdir is required unless --baselines")
    result = pm.hook.avo_evaluate(target=spec, workdir=Path(args.workdir).resolve(), options=options)
    if result is None:
        raise RuntimeError(f"plugin {args.plugin!r} returned no result for target {spec.name!r}")
    return _validated(result, "avo_evaluate").model_dump_json(exclude_none=True)


def _validated(value: Any, hook: str) -> EvalResult:
    if isinstance(value, EvalResult):
        return value
    if isinstance(value, dict):
        return EvalResult.model_validate(value)
    raise TypeError(f"{hook} returned {type(value).__name__}, expected an EvalResult")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="avo.evaluator")
    parser.add_argument("--module", required=True)
    parser.add_argument("--plugin", required=True)
    parser.add_argument("--spec", required=True)
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
