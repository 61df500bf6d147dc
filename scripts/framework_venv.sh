#!/usr/bin/env bash
# Create (or reuse) the virtual environment of one GRPO framework the integration tests
# call for real: openrlhf, skyrl or areal. Each framework gets its own venv because their
# pins conflict with verl's (the main .venv) and with each other.
#
#   bash scripts/framework_venv.sh openrlhf        # -> .venvs/openrlhf/bin/python
#
# A venv is reused while its recipe (the install function below) is unchanged: the
# recipe's hash is written to .venvs/NAME/.recipe once every step and the import check
# passed. grpo-monitor itself is installed editable from this checkout (re-pointed when
# the venv was made from another checkout). GRPO_MONITOR_VENVS moves the venvs elsewhere.
# Only package registries are used. Exit codes: 0 ready, 1 install failed (log in
# .venvs/NAME.log), 2 usage.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
FRAMEWORK=${1:-}
ROOT=${GRPO_MONITOR_VENVS:-$REPO/.venvs}
PY=${PYTHON:-python3}
TORCH="torch==2.13.0"  # first, as in setup_env.sh: an unpinned torch would pull a multi-GB CUDA build

install_openrlhf() {
  pip install --no-deps openrlhf==0.11.2  # its flash-attn requirement builds from source: no deps
  pip install ray==2.55.0 transformers==5.15.0 peft tqdm pylatexenc aiohttp einops jsonlines optree torchdata loralib
  DS_BUILD_OPS=0 pip install --no-build-isolation deepspeed==0.19.6
}
check_openrlhf() {
  python -c "import openrlhf, deepspeed, ray, transformers, grpo_monitor"
}

install_skyrl() {
  # skyrl-train declares Python >= 3.12 only; its code runs on 3.11. skyrl's pydantic configs
  # need typing.TypedDict = typing_extensions.TypedDict below 3.12 (skyrl.allow_python311()).
  pip install --no-deps --ignore-requires-python skyrl-train==0.3.1
  pip install ray==2.51.1 jaxtyping loguru omegaconf
  # skyrl's ppo_utils imports skyrl.train.config, which imports skyrl_gym's environments.
  pip install --no-deps --ignore-requires-python skyrl==0.3.0 skyrl-gym==0.4.0
  # ppo_utils pickles its registered functions with cloudpickle when Ray is up (its fallback, plain
  # pickle, cannot pickle them mid-import); SkyRL's real environments get it through vllm.
  pip install func_timeout pandas cloudpickle
}
check_skyrl() {
  python -c "import skyrl_train.utils.ppo_utils, grpo_monitor"
  python -c "import typing, typing_extensions; typing.TypedDict = typing_extensions.TypedDict; import skyrl.backends.skyrl_train.utils.ppo_utils"
}

install_areal() {
  pip install --no-deps areal==1.0.4  # a plain install resolves 285 packages including a CUDA torch
  pip install aiohttp httpx colorlog tenacity flask torchdata lark uvloop pyyaml hydra-core transformers ray numba \
    pillow orjson einops aiofiles openai datasets swanlab trackio wandb tensorboardX tabulate pybase64
}
check_areal() {
  python -c "import areal.utils.data, areal.trainer.ppo.actor, grpo_monitor"
}

case "$FRAMEWORK" in
  openrlhf|skyrl|areal) ;;
  *) echo "usage: $0 openrlhf|skyrl|areal" >&2; exit 2 ;;
esac

VENV=$ROOT/$FRAMEWORK
LOG=$ROOT/$FRAMEWORK.log
RECIPE=$( { declare -f "install_$FRAMEWORK" "check_$FRAMEWORK"; echo "$TORCH"; "$PY" --version; } | sha256sum | cut -c1-16)
mkdir -p "$ROOT"
exec 9>"$ROOT/$FRAMEWORK.lock"
flock 9  # two test processes asking at once: the second waits, then finds the venv ready

editable_here() {  # grpo_monitor in the venv is this checkout's (run from /: the cwd would shadow the install)
  (cd / && "$VENV/bin/python" - "$REPO") <<'EOF' 2>/dev/null
import pathlib, sys
import grpo_monitor
sys.exit(0 if pathlib.Path(grpo_monitor.__file__).resolve().is_relative_to(pathlib.Path(sys.argv[1]).resolve()) else 1)
EOF
}

if [ -f "$VENV/.recipe" ] && [ "$(cat "$VENV/.recipe")" = "$RECIPE" ]; then
  if ! editable_here; then
    "$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$REPO" >>"$LOG" 2>&1 \
      || { echo "framework_venv: re-pointing grpo-monitor in $VENV failed; see $LOG" >&2; exit 1; }
  fi
  echo "$VENV/bin/python"
  exit 0
fi

start=$(date +%s)
echo "framework_venv: creating $VENV (log: $LOG)" >&2
rm -rf "$VENV"
: >"$LOG"
(
  set -euxo pipefail
  "$PY" -m venv "$VENV"
  export PATH="$VENV/bin:$PATH" PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off
  pip install --upgrade pip setuptools wheel
  pip install "$TORCH"
  "install_$FRAMEWORK"
  pip install pydantic numpy
  pip install --no-deps --no-build-isolation -e "$REPO"
  cd /tmp && "check_$FRAMEWORK"
) >>"$LOG" 2>&1 || {
  echo "framework_venv: creating the $FRAMEWORK venv failed after $(( $(date +%s) - start )) s; last lines of $LOG:" >&2
  tail -n 15 "$LOG" >&2
  exit 1
}
echo "$RECIPE" >"$VENV/.recipe"
echo "framework_venv: $FRAMEWORK ready in $(( $(date +%s) - start )) s" >&2
echo "$VENV/bin/python"
