"""``grpo-monitor audit`` on frameworks' real shipped advantage code, run in the framework's own venv.

``python audit_cases.py skyrl-maxrl`` (SkyRL venv) or ``areal-grpo`` (AReaL venv); prints ``GRPO_CASES {json}``:
each case's verdict, violations (probe, dtype, invariant, severity, hint) and notes.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from _cases import run
from grpo_monitor.tools.audit import audit


def skyrl_maxrl():
    """SkyRL's compute_advantages_and_returns(adv_estimator='maxrl'): outcome reward on each row's last token."""
    from grpo_monitor.integrations import skyrl as gsk

    gsk.allow_python311()
    import skyrl.backends.skyrl_train.utils.ppo_utils as utils
    from omegaconf import OmegaConf

    def fn(r: torch.Tensor) -> torch.Tensor:
        B, G = r.shape
        rewards = torch.zeros(B * G, 3)  # float32, as SkyRL's token rewards are
        rewards[:, -1] = r.reshape(-1).float()
        uid = np.array([f"uid-{i // G}" for i in range(B * G)], dtype=object)
        adv, _ = utils.compute_advantages_and_returns(
            token_level_rewards=rewards, response_mask=torch.ones(B * G, 3), index=uid, adv_estimator="maxrl",
            config=OmegaConf.create({"advantage_estimator": "maxrl"}), values=None, grpo_norm_by_std=True,
            gamma=1.0, lambd=1.0)
        return adv[:, -1].reshape(B, G).to(r.dtype)

    return fn


def areal_grpo():
    """AReaL's PPOActor._compute_advantages with its shipped reward clip (GRPO normalisation and batch whitening,
    no KL)."""
    import logging

    from areal.api.cli_args import NormConfig, PPOActorConfig
    from areal.trainer.ppo.actor import PPOActor

    logging.disable(logging.INFO)

    def fn(r: torch.Tensor) -> torch.Tensor:
        B, G = r.shape
        config = PPOActorConfig(experiment_name="grpo-monitor", trial_name="audit", path="/nonexistent", kl_ctl=0.0,
                                reward_norm=NormConfig(mean_level="group", std_level="group", group_size=G),
                                adv_norm=NormConfig(mean_level="batch", std_level="batch"))
        n, T = B * G, 4
        data = {"input_ids": torch.zeros(n, T, dtype=torch.long), "rewards": r.reshape(-1).float(),
                "attention_mask": torch.ones(n, T, dtype=torch.long),
                "loss_mask": torch.tensor([[0, 1, 1, 1]] * n), "logprobs": torch.zeros(n, T)}
        out = PPOActor(config, engine=None)._compute_advantages(data)
        return out["advantages"][:, 1].reshape(B, G).to(r.dtype)

    return fn


def _audit(make) -> dict:
    result = audit(make(), 8)
    keep = ("probe", "dtype", "invariant", "severity", "hint", "observed")
    return {"verdict": result.verdict, "inferred": result.inferred, "notes": result.notes,
            "violations": [{k: v[k] for k in keep} for v in result.violations]}


CASES = {"skyrl-maxrl": lambda: _audit(skyrl_maxrl), "areal-grpo": lambda: _audit(areal_grpo)}

if __name__ == "__main__":
    run(CASES, sys.argv[1:])
