#!/usr/bin/env bash
# Create .venv (if needed) and install grpo-monitor with every optional extra.
# torch is pinned first: the CPU wheel of 2.13.0 is what this project is tested with,
# and an unpinned torch would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[test]"
