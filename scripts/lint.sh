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

# grpo_monitor.integrations lives in integrations/ (package-dir in pyproject.toml), which mypy
# cannot map from the source folders: it reads the package from a tree of links that mirrors
# the installed layout, and its paths are turned back into the repository's below.
echo "lint: mypy -p grpo_monitor"
tree=.mypy_cache/tree
rm -rf "$tree" && mkdir -p "$tree/grpo_monitor" || exit 1
for entry in grpo_monitor/*; do
  name=$(basename "$entry")
  [ "$name" = __pycache__ ] || ln -s "../../../$entry" "$tree/grpo_monitor/$name"
done
ln -s ../../../integrations "$tree/grpo_monitor/integrations"
MYPYPATH=$tree "$PY" -m mypy -p grpo_monitor 2>&1 \
  | sed -e "s#^$tree/grpo_monitor/integrations/#integrations/#" -e "s#^$tree/grpo_monitor/#grpo_monitor/#"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

if [ "$status" -ne 0 ]; then
  echo "lint: FAILED (ruff or mypy findings above; see pyproject.toml [tool.ruff] and [tool.mypy])" >&2
fi
exit "$status"
