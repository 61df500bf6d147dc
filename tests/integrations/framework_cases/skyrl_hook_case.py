"""SkyRL's setup-hook attach imports nothing of SkyRL; the trainer's first import of ``ppo_utils`` attaches.

Run in the SkyRL venv: ``python skyrl_hook_case.py LOG.jsonl``; prints ``GRPO_CASES {json}``. Without Ray:
what is checked is the order of events the Ray test relies on (ray_cases.py runs it in a real actor).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch
from omegaconf import OmegaConf

from grpo_monitor.integrations import skyrl as gsk


def main(log: str) -> dict:
    os.environ["GRPO_MONITOR_CONFIG"] = json.dumps({"group_size": 4, "sinks": [f"jsonl:{log}"]})
    out = {"returned": repr(gsk.attach_from_env()),
           "imported_by_hook": sorted(m for m in sys.modules if m.split(".")[0] in ("skyrl", "skyrl_train", "ray"))}
    from skyrl_train.utils.ppo_utils import compute_advantages_and_returns  # the trainer's own import

    out["bound_wrapper"] = hasattr(compute_advantages_and_returns, "__grpo_monitor_original__")
    rewards = torch.zeros(8, 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    compute_advantages_and_returns(token_level_rewards=rewards, response_mask=torch.ones(8, 3),
                                   index=np.array([i // 4 for i in range(8)]), adv_estimator="grpo",
                                   config=OmegaConf.create({"advantage_estimator": "grpo"}), values=None,
                                   grpo_norm_by_std=True, gamma=1.0, lambd=1.0)
    out["attached"] = gsk.attached() is not None
    gsk.detach()
    with open(log) as f:
        out["records"] = [json.loads(line)["step"] for line in f]
    return out


if __name__ == "__main__":
    print("GRPO_CASES " + json.dumps(main(sys.argv[1])), flush=True)
