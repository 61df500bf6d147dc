"""A malformed job-level GRPO_MONITOR_CONFIG in a Ray task (the worker_process_setup_hook reads it): the driver
gets the worded error from the task that trains, not an unexplained WorkerCrashedError; other tasks run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from framework_venv import ENV, MARKER

pytest.importorskip("ray")
pytest.importorskip("verl")
pytestmark = pytest.mark.slow

CASE = Path(__file__).with_name("framework_cases") / "ray_bad_config_case.py"

BAD = [
    pytest.param('{"group_sise": 8}', "invalid MonitorConfig", id="misspelt-field"),
    pytest.param('{"group_size": ' + "9" * 5000 + "}", "out of range", id="5000-digit-integer"),
]


@pytest.mark.parametrize("config, words", BAD)
def test_a_malformed_environment_config_reaches_the_driver_from_a_task(config, words, tmp_path):
    """ray.get of the trainer task raises RayTaskError(ValueError) naming GRPO_MONITOR_CONFIG and what is wrong;
    a task that never calls the entry point returns its value."""
    env = {**os.environ, **ENV, "RAY_memory_monitor_refresh_ms": "0"}  # see test_ray.py: the memory monitor off
    proc = subprocess.run([sys.executable, str(CASE), config], capture_output=True, text=True, timeout=420, env=env,
                          cwd=tmp_path)
    found = [line[len(MARKER):] for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    assert proc.returncode == 0 and found, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = json.loads(found[-1])
    assert out["rollout"] == {"result": 42}, out
    trainer = out["trainer"]
    assert trainer.get("raised") in ("RayTaskError", "RayTaskError(ValueError)"), trainer
    assert "GRPO_MONITOR_CONFIG" in trainer["message"] and words in trainer["message"], trainer["message"]
