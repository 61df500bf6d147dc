"""The one-line attach inside Ray, for real: a local CPU Ray cluster per framework, workers attached by
``worker_process_setup_hook`` from ``GRPO_MONITOR_CONFIG``, a trainer actor calling the framework's real
advantage entry point once per step (verl's ``ray_trainer.compute_advantage`` on real DataProtos, SkyRL's
dispatcher, OpenRLHF's experience maker), and no ``end_step()`` in user code.

Each test runs ``framework_cases/ray_cases.py`` with the framework's python (verl: this venv); Ray starts
once per framework.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from framework_venv import ENV, MARKER, framework_python

pytest.importorskip("ray")
pytestmark = pytest.mark.slow

CASES = Path(__file__).with_name("framework_cases") / "ray_cases.py"


def run_ray_cases(framework: str, python: str, logdir: Path) -> dict:
    # Ray's memory monitor kills a worker when the whole node is above 95% memory, whoever uses it (another test
    # run on a shared machine did: OutOfMemoryError in place of the breach); these cases need ~1 GB, so it is off.
    env = {**os.environ, **ENV, "RAY_memory_monitor_refresh_ms": "0"}
    proc = subprocess.run([python, str(CASES), framework, str(logdir)], capture_output=True, text=True,
                          timeout=420, env=env)
    found = [line[len(MARKER):] for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    if proc.returncode != 0 or not found:
        raise AssertionError(f"ray_cases.py {framework} exited {proc.returncode} without results:\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}")
    return json.loads(found[-1])


def check_healthy(result: dict) -> None:
    """The actor attached through the hook and its monitor logged one clean step per entry-point call."""
    healthy = result["healthy"]
    assert healthy.get("result", {}).get("attached") is True, healthy
    records = healthy["records"]
    assert [r["step"] for r in records] == [0, 1, 2]
    assert all(r["violations"] == [] and not r["failed"] for r in records)
    assert all(r["metrics"]["grpo/groups/degenerate_rate"] == 0.25 for r in records)  # one constant group of 4


def check_broken(result: dict, invariant: str | None) -> None:
    """The broken step failed the driver's ray.get with an error naming the invariant; its record says so."""
    broken = result["broken"]
    assert broken.get("raised") in ("RayTaskError", "RayTaskError(InvariantViolation)"), broken
    assert "InvariantViolation" in broken["message"]
    (record,) = broken["records"]
    assert record["failed"] and record["step"] == 0
    names = {v["invariant"] for v in record["violations"]}
    assert any(f"invariant '{name}' broken" in broken["message"] for name in names)
    if invariant is not None:
        assert invariant in names


def test_verl_compute_advantage_in_a_ray_actor(tmp_path):
    """verl: healthy steps logged from the actor, a registered broken estimator stops it, and an attach in the
    driver (which never calls compute_advantage) says so."""
    result = run_ray_cases("verl", sys.executable, tmp_path)
    check_healthy(result)
    check_broken(result, "zero_group_mean")
    assert any("attached in the Ray driver" in w and "never called" in w for w in result["driver"]["warnings"])


def test_skyrl_dispatcher_in_a_ray_actor(tmp_path):
    """SkyRL (skyrl-train, its own venv): the same through ppo_utils.compute_advantages_and_returns; the hook
    imports nothing of SkyRL (ppo_utils creates its registry actor on import, which a setup hook must not do)
    and wraps the dispatcher when the actor imports ppo_utils."""
    result = run_ray_cases("skyrl", framework_python("skyrl"), tmp_path)
    check_healthy(result)
    check_broken(result, "zero_group_mean")


def test_openrlhf_experience_maker_in_a_ray_actor(tmp_path):
    """OpenRLHF (its own venv): the same through RemoteExperienceMaker.compute_advantages_and_returns; the env
    declares another estimator than the one computed, which the check refuses."""
    result = run_ray_cases("openrlhf", framework_python("openrlhf"), tmp_path)
    check_healthy(result)
    check_broken(result, None)
