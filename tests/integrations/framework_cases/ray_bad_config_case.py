"""A malformed job-level ``GRPO_MONITOR_CONFIG`` in a Ray *task*: the task that calls verl's entry point fails
with the worded error and the driver reads it; a task that never calls it runs as usual.

Run with the main venv's python: ``python ray_bad_config_case.py CONFIG``; prints ``GRPO_CASES {json}``.
"""

from __future__ import annotations

import json
import sys

import ray

CONFIG = sys.argv[1]


@ray.remote(max_retries=0)
def trainer_task() -> str:
    """verl's ``compute_advantage`` as a task calls it (the arguments never reach verl: the config error does)."""
    from verl.trainer.ppo import ray_trainer

    ray_trainer.compute_advantage(None)
    return "returned"


@ray.remote(max_retries=0)
def rollout_task() -> int:
    return 41 + 1


def main() -> None:
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
             runtime_env={"worker_process_setup_hook": "grpo_monitor.integrations.verl.attach_from_env",
                          "env_vars": {"GRPO_MONITOR_CONFIG": CONFIG, "PYTHONWARNINGS": "ignore"}})
    out = {}
    try:
        out["rollout"] = {"result": ray.get(rollout_task.remote(), timeout=240)}
    except ray.exceptions.RayError as exc:
        out["rollout"] = {"raised": type(exc).__name__, "message": str(exc)[-2000:]}
    try:
        out["trainer"] = {"result": ray.get(trainer_task.remote(), timeout=240)}
    except ray.exceptions.RayError as exc:
        out["trainer"] = {"raised": type(exc).__name__, "message": str(exc)[-3000:]}
    ray.shutdown()
    print("GRPO_CASES " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
