#!/usr/bin/env bash
# Style and types, with the tools in .venv: ruff (rules in pyproject.toml [tool.ruff]) and mypy
# ([tool.mypy]) on the grpo_monitor package, grpo_monitor.integrations included.
# Exits non-zero on any finding; run by scripts/test.sh before the tests.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
status=0

echo "lint: ruff check"
"$PY" -m ruff check || status=1

# grpo_monitor.integrations lives in integrations/ (package-dir in pyproject.toml). Its modules import the core
# by absolute name (grpo_monitor.config ...) and each other relatively, and the core never imports them
# (tests/test_floor_plan.py), so mypy checks it as the top package it is on disk, beside grpo_monitor.
echo "lint: mypy -p grpo_monitor -p integrations"
"$PY" -m mypy -p grpo_monitor -p integrations
[ $? -eq 0 ] || status=1

if [ "$status" -ne 0 ]; then
  echo "lint: FAILED (ruff or mypy findings above; see pyproject.toml [tool.ruff] and [tool.mypy])" >&2
fi
exit "$status"
