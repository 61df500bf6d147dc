#!/usr/bin/env bash
# The whole test suite on a fresh machine: environment, install, lint (ruff, mypy), browser, the framework
# venvs, pytest. Exits non-zero unless lint is clean and tests ran and passed (pytest's exit 5, "no tests",
# fails too). Each long phase prints one line before it starts and one when it ends (time, size).
#
#   GRPO_MONITOR_SKIP_FRAMEWORKS=1 bash scripts/test.sh   # skip the OpenRLHF/SkyRL/AReaL venvs (~7 min, ~5 GB
#                                                        # cold); their tests are then skipped with that reason
# CI sets neither: it builds the three venvs and runs their tests.
set -uo pipefail
cd "$(dirname "$0")/.."

phase() { echo "test.sh: $*" >&2; }
since() { echo "$(( $(date +%s) - $1 )) s"; }

start=$(date +%s)
phase "setting up .venv (scripts/setup_env.sh: pip install of torch and the extras; minutes when cold)"
bash scripts/setup_env.sh || exit 1
phase ".venv ready in $(since "$start") ($(du -sh .venv 2>/dev/null | cut -f1))"
if ! bash scripts/lint.sh; then
  echo "scripts/lint.sh found ruff or mypy findings: failing before the tests (fix them, then rerun)" >&2
  exit 1
fi
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  # The report test checks the HTML page in a real headless browser.
  start=$(date +%s)
  log=$(mktemp -t grpo-monitor-apt.XXXXXX)
  phase "installing Debian packages chromium and chromium-driver for the browser test (apt-get; log: $log)"
  if (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) \
      >"$log" 2>&1; then
    phase "chromium installed in $(since "$start")"
  else
    echo "warning: could not install chromium (the browser test will be skipped); last lines of $log:" >&2
    tail -n 20 "$log" >&2
  fi
fi
if [ "${GRPO_MONITOR_SKIP_FRAMEWORKS:-}" = 1 ]; then
  phase "GRPO_MONITOR_SKIP_FRAMEWORKS=1: not building the OpenRLHF, SkyRL and AReaL venvs; their tests skip"
else
  venvs=${GRPO_MONITOR_VENVS:-.venvs}
  for name in openrlhf skyrl areal; do
    start=$(date +%s)
    phase "framework venv $name ($venvs/$name; reused when its recipe is unchanged, else built: minutes and" \
      "1-2 GB each; skip all three with GRPO_MONITOR_SKIP_FRAMEWORKS=1)"
    if bash scripts/framework_venv.sh "$name" >/dev/null; then
      phase "framework venv $name ready in $(since "$start") ($(du -sh "$venvs/$name" 2>/dev/null | cut -f1))"
    else
      phase "framework venv $name failed after $(since "$start") (log above); its tests will skip or fail"
    fi
  done
fi
export HF_HUB_OFFLINE=1 WANDB_MODE=offline WANDB_SILENT=true TOKENIZERS_PARALLELISM=false
phase "running pytest"
.venv/bin/python -m pytest "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$status"
