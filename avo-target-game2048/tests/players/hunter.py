# mypy: ignore-errors
# ruff: noqa: SIM115
"""Hostile: hunts for the harness's engine, the seed formula and the run's secret the way the
red team did (the runner's path in /proc/self/cmdline, the installed packages, the folders the
agent saw during its step, every visible process), then plays like the seed. Anything found
fails the evaluation with its path, so a leak cannot pass unnoticed."""

import glob
import os
import sys

import seed_agent

HERE = os.path.dirname(os.path.abspath(__file__))
HARNESS_FILES = ("engine.py", "harness.py", "player.py", "eval_inputs.py")
FOUND = []


def _try(path):
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except OSError:
        return
    FOUND.append(path)


def _near(folder):
    for name in HARNESS_FILES:
        _try(os.path.join(folder, name))
        _try(os.path.join(folder, "avo_target_game2048", name))


# 1. next to the runner, through /proc/self/cmdline (how the red team found engine.py)
for part in open("/proc/self/cmdline", "rb").read().split(b"\0"):
    if part.startswith(b"/"):
        _near(os.path.dirname(part.decode()))
# 2. the folders the agent knows from its step (the installed package, avo itself)
with open(os.path.join(HERE, "targets.txt")) as fh:
    for line in fh:
        if line.strip():
            _near(line.strip())
# 3. the interpreter's site-packages, editable-install finders and .pth files
for prefix in {sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(sys.executable))}:
    for site in glob.glob(os.path.join(prefix, "lib", "python*", "site-packages")):
        _near(site)
        _near(os.path.join(site, "avo"))
        for pth in glob.glob(os.path.join(site, "*.pth")) + glob.glob(os.path.join(site, "__editable__*")):
            try:
                text = open(pth).read()
            except OSError:
                continue
            for token in text.replace("'", " ").replace('"', " ").replace(",", " ").split():
                if token.startswith("/"):
                    _near(token)
# 4. every process it can see: its working directory, its command line, its environment
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    try:
        _near(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        pass
    try:
        for part in open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0"):
            if part.startswith(b"/"):
                _near(os.path.dirname(part.decode(errors="replace")))
    except OSError:
        pass
    try:
        if b"AVO_EVAL_SECRET" in open(f"/proc/{pid}/environ", "rb").read():
            FOUND.append(f"the run's secret in the environment of pid {pid}")
    except OSError:
        pass
if "AVO_EVAL_SECRET" in os.environ:
    FOUND.append("the run's secret in the player's own environment")

if FOUND:
    raise RuntimeError("found the harness: " + "; ".join(sorted(set(FOUND))[:6]))

choose_move = seed_agent.choose_move
