#!/usr/bin/env bash
# The whole test suite on a fresh machine: environment, install, lint (ruff, mypy), browser, pytest.
# Exits non-zero unless lint is clean and tests ran and passed (pytest's exit 5, "no tests", fails too).
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh || exit 1
if ! bash scripts/lint.sh; then
  echo "scripts/lint.sh found ruff or mypy findings: failing before the tests (fix them, then rerun)" >&2
  exit 1
fi
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  # The report test checks the HTML page in a real headless browser.
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >/dev/null 2>&1 \
    || echo "warning: could not install chromium; the browser test will be skipped"
fi
export HF_HUB_OFFLINE=1 WANDB_MODE=offline WANDB_SILENT=true TOKENIZERS_PARALLELISM=false
.venv/bin/python -m pytest "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$status"
