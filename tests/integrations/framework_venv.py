"""Run code in a framework's own venv (OpenRLHF, SkyRL, AReaL) from the main test process.

The three frameworks pin versions that conflict with verl's (the main ``.venv``) and with
each other, so each lives in a venv made by ``scripts/framework_venv.sh NAME`` (cached in
``.venvs/``, rebuilt when its recipe changes). The tests call the framework's real
functions there through a case script (``framework_cases/NAME_cases.py``) that prints one
JSON line. When the venv cannot be created the tests are skipped with the script's reason;
``GRPO_MONITOR_REQUIRE_FRAMEWORKS=1`` makes that a failure instead. ``GRPO_MONITOR_SKIP_FRAMEWORKS=1``
skips them without building anything (a quick local run; CI sets neither).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CASES = Path(__file__).resolve().parent / "framework_cases"
SCRIPT = REPO / "scripts" / "framework_venv.sh"
MARKER = "GRPO_CASES "
CREATE_TIMEOUT = 1800  # seconds: a cold AReaL venv takes about 2 minutes here
ENV = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "WANDB_SILENT": "true", "TOKENIZERS_PARALLELISM": "false",
       "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore::DeprecationWarning",
       "GRPO_MONITOR_LOG_DIR": tempfile.mkdtemp(prefix="grpo-monitor-fallback-")}  # sinks="auto" with no tracker


@functools.cache
def _create(name: str) -> tuple[str | None, str]:
    """(python path, "") once the venv is ready, else (None, why)."""
    try:
        proc = subprocess.run(["bash", str(SCRIPT), name], capture_output=True, text=True, timeout=CREATE_TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, f"scripts/framework_venv.sh {name} ran over {CREATE_TIMEOUT} s"
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = " | ".join(proc.stderr.strip().splitlines()[-6:])
        return None, f"scripts/framework_venv.sh {name} failed (exit {proc.returncode}): {tail}"
    return lines[-1], ""


def framework_python(name: str) -> str:
    """The python of ``name``'s venv; skips the test (fails under GRPO_MONITOR_REQUIRE_FRAMEWORKS=1) without it."""
    required = os.environ.get("GRPO_MONITOR_REQUIRE_FRAMEWORKS") == "1"
    if os.environ.get("GRPO_MONITOR_SKIP_FRAMEWORKS") == "1" and not required:
        pytest.skip(f"GRPO_MONITOR_SKIP_FRAMEWORKS=1: the {name} venv is not built, its real functions not called")
    python, why = _create(name)
    if python is None:
        reason = f"the {name} venv could not be created, so its real functions cannot be called: {why}"
        if os.environ.get("GRPO_MONITOR_REQUIRE_FRAMEWORKS") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return python


def run_in_venv(name: str, script: Path, *args: str, timeout: float = 300, cwd: Path | None = None,
                ) -> subprocess.CompletedProcess:
    """Run ``script`` with the framework venv's python (stdout and stderr captured, text)."""
    return subprocess.run([framework_python(name), str(script), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or REPO, env={**os.environ, **ENV})


def run_cases(name: str, *selected: str) -> dict[str, Any]:
    """Every case of ``framework_cases/<name>_cases.py`` (or ``selected``): case id -> its JSON result."""
    proc = run_in_venv(name, CASES / f"{name}_cases.py", *selected)
    found = [line[len(MARKER):] for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    if proc.returncode != 0 or not found:
        raise AssertionError(f"{name}_cases.py exited {proc.returncode} without results:\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(found[-1])


def quiet(result: dict[str, Any]) -> str:
    """An assertion message for a case that should have passed quietly."""
    return json.dumps({k: v for k, v in result.items() if k != "metrics"}, indent=1)[:4000]
