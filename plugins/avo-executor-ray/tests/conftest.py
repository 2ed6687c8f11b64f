"""A real Ray cluster on 127.0.0.1 for the executor's tests: a head node and a worker node.

The head holds 2 CPUs. The worker node holds 1 CPU and a custom accelerator type
``probe``; it runs with a PYTHONPATH that installs a *different* build of a throwaway
target plugin (avo-target-probe), so a job placed there meets an evaluator that differs
from the one the run recorded. Both nodes are stopped in the fixture's finally.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from avo.plugins import reset_plugin_manager

ROOT = Path(__file__).resolve().parents[3]
TOY = ROOT / "tests" / "fixtures" / "toy"
RAY = str(Path(sys.executable).with_name("ray"))

PROBE_PLUGIN = '''"""A throwaway target plugin for the Ray executor's tests."""
from pathlib import Path

from avo.hookspecs import hookimpl
from avo.models import EvalResult, TargetResources, TargetSpec

BUILD = {build!r}


@hookimpl
def avo_targets():
    return [TargetSpec(name="probe", entrypoint="x.txt", eval_timeout=60,
                       resources=TargetResources(cpus=1, accelerator="probe"))]


@hookimpl
def avo_seed(target, dest):
    if target.name != "probe":
        return None
    (Path(dest) / "x.txt").write_text("1\\n")
    return True


@hookimpl
def avo_knowledge(target, dest):
    return True if target.name == "probe" else None


@hookimpl
def avo_evaluate(target, workdir, options):
    if target.name != "probe":
        return None
    return EvalResult(correct=True, metrics={{"x": float((Path(workdir) / "x.txt").read_text())}})
'''


def write_probe(folder: Path, build: str) -> Path:
    """An installed-looking distribution ``avo-target-probe`` under ``folder`` (for PYTHONPATH)."""
    pkg = folder / "avo_target_probe"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(PROBE_PLUGIN.format(build=build))
    info = folder / "avo_target_probe-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: avo-target-probe\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[avo]\nprobe = avo_target_probe\n")
    return folder


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    address: str
    honest_probe: Path  # the probe build the driver installs
    temp_dir: Path


def _processes() -> dict[int, tuple[int, str]]:
    """``{pid: (parent pid, command line)}`` of every process we can see."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        out[int(entry.name)] = (ppid, cmd)
    return out


def stop_cluster(temp_dir: Path) -> None:
    """Kill exactly this cluster's processes (they name its temp dir) and their children.

    Not `ray stop`: that would stop every Ray instance of the machine, not only ours.
    """
    procs = _processes()
    mine, pid = set(), os.getpid()  # this process and its parents may name the folder too
    while pid in procs and pid not in mine:
        mine.add(pid)
        pid = procs[pid][0]
    ours = {pid for pid, (_, cmd) in procs.items() if str(temp_dir) in cmd} - mine
    grown = True
    while grown:
        more = {pid for pid, (ppid, _) in procs.items() if ppid in ours} - ours
        ours |= more
        grown = bool(more)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in ours:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(1)


def _ray(args: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run([RAY, *args], capture_output=True, text=True, env=env, timeout=180)
    if proc.returncode != 0:
        raise RuntimeError(f"ray {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def _wait_for_nodes(address: str, n: int, env: dict[str, str]) -> None:
    probe = ("import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False, logging_level='error');"
             "print(sum(1 for x in ray.nodes() if x['Alive']))")
    for _ in range(60):
        out = subprocess.run([sys.executable, "-c", probe, address], capture_output=True, text=True, env=env)
        if out.stdout.strip().isdigit() and int(out.stdout.strip()) >= n:
            return
        time.sleep(1)
    raise RuntimeError(f"the Ray cluster at {address} did not show {n} nodes")


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    # A short temp dir: Ray's socket paths must stay under the Unix limit.
    tmp = Path(tempfile.mkdtemp(prefix="avoray-", dir="/tmp"))
    honest = write_probe(tmp / "probe-honest", "honest")
    other = write_probe(tmp / "probe-other", "other")
    port = _free_port()
    address = f"127.0.0.1:{port}"
    # No token auth: a test cluster on 127.0.0.1 only, and no token file left in ~/.ray.
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_DISABLE_IMPORT_WARNING": "1", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    common = ["--disable-usage-stats", "--object-store-memory", str(80 * 1024 * 1024)]
    try:
        _ray(["start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port), "--num-cpus", "2",
              "--include-dashboard=false", "--temp-dir", str(tmp / "ray"), *common],
             {**env, "PYTHONPATH": str(honest)})
        _ray(["start", "--address", address, "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
              "--resources", json.dumps({"accelerator_type:probe": 1}), *common],
             {**env, "PYTHONPATH": str(other)})
        _wait_for_nodes(address, 2, env)
        yield Cluster(address, honest, tmp)
    finally:
        from avo_executor_ray.cluster import shutdown

        shutdown()
        stop_cluster(tmp)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def ray_env(cluster: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Cluster:
    """The driver connected to the test cluster through $RAY_ADDRESS, with a private runs dir."""
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("AVO_RUNS_DIR", str(tmp_path / "runs"))
    reset_plugin_manager()
    return cluster


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    dest = tmp_path / "toy"
    shutil.copytree(TOY, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest
