"""nox sessions: tests, lint, bench. Every local distribution is found by scanning folders.

The core lives at the root; targets in ``avo-target-*/``; backends in ``plugins/*/``. Each
session installs all of them (requirements.txt lists the same set for a user's install).
"""

from __future__ import annotations

from pathlib import Path

import nox

ROOT = Path(__file__).parent
nox.options.sessions = ["tests", "lint"]
nox.options.reuse_existing_virtualenvs = True


def distributions() -> list[Path]:
    """Every distribution folder besides the core, in a stable order."""
    found = sorted(ROOT.glob("avo-target-*/pyproject.toml")) + sorted(ROOT.glob("plugins/*/pyproject.toml"))
    return [p.parent for p in found]


def install_all(session: nox.Session) -> None:
    session.install("-r", "requirements.txt")


def install_opt_ins(session: nox.Session) -> None:
    """What users opt into and the tests and benchmarks measure: every distribution's extras."""
    # attention_triton's torch and Triton (~2 GB) are opt-in for users; its tests and bench need
    # them (without a GPU the kernels run under Triton's interpreter, on torch's CPU wheel).
    session.install("-e", "./avo-target-attention-triton[gpu]")
    # attention_c's torch SDPA baseline runs whenever torch is importable (a CPU wheel); after
    # the line above, so the torch pinned there (2.13.0, a CPU wheel) satisfies it.
    session.install("-e", "./avo-target-attention-c[torch]")
    # The Ray executor is opt-in for users (it pulls Ray); its tests start a real Ray cluster
    # and its bench.py measures Ray dispatch.
    session.install("-e", "./plugins/avo-executor-ray")


@nox.session
def tests(session: nox.Session) -> None:
    """Core tests with every plugin installed, then each distribution's own tests."""
    install_all(session)
    install_opt_ins(session)
    # The agent_sdk backend's tests exercise the real SDK's option and message types; users
    # get it with `pip install ./plugins/avo-backend-agent-sdk[sdk]` (it bundles a CLI).
    session.install("pytest", "claude-agent-sdk")
    session.run("pytest", "tests", "-q", *session.posargs)
    for dist in distributions():
        if (dist / "tests").is_dir():
            session.run("pytest", str(dist / "tests"), "-q", "-p", "no:cacheprovider", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff and mypy over the core and every distribution."""
    install_all(session)
    session.install("ruff", "mypy", "types-PyYAML")
    paths = ["avo", "tests", "bench", "noxfile.py", *(str(d) for d in distributions())]
    session.run("ruff", "check", *paths)
    session.run("mypy", "avo", *(str(d / d.name.replace("-", "_")) for d in distributions()
                                 if (d / d.name.replace("-", "_")).is_dir()))


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks of the core and of each distribution, written to bench-report.md."""
    install_all(session)
    install_opt_ins(session)
    report = ROOT / "bench-report.md"
    report.write_text("# avo benchmark report\n\n")
    session.run("python", "bench/core_bench.py", str(report))
    for dist in distributions():
        if (dist / "bench.py").exists():
            session.run("python", str(dist / "bench.py"), str(report))
    session.log(f"report written to {report}")
