#!/usr/bin/env bash
# Install everything avo needs into ./.venv: bubblewrap (the sandbox for candidate code, a
# Debian/Ubuntu package; skipped with a warning where apt-get is missing) and every
# distribution in this repository. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v bwrap >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    as_root=""
    [ "$(id -u)" = 0 ] || as_root="sudo"
    $as_root apt-get update -qq && $as_root apt-get install -y -qq bubblewrap
  else
    echo "install.sh: no apt-get here; install bubblewrap with your package manager." >&2
    echo "install.sh: without it avo runs candidates unsandboxed and records 'avo-sandbox: none'." >&2
  fi
fi
[ -d .venv ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements.txt
echo "installed: . .venv/bin/activate, then avo doctor"
