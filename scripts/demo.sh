#!/usr/bin/env bash
# The main job on a fresh machine: environment, install, `grpo-monitor demo`, report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export HF_HUB_OFFLINE=1
.venv/bin/grpo-monitor demo --out "${1:-runs/demo}"
