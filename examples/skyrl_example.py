"""grpo-monitor around SkyRL's own advantage dispatcher (skyrl 0.3.0, CPU, a few seconds).

``grpo_skyrl.attach()`` wraps ``ppo_utils.compute_advantages_and_returns``, which SkyRL's
trainer calls once per step with ``adv_estimator``, ``grpo_norm_by_std`` and the batch's
``uid`` index; the dispatcher calls the estimator registered in ``AdvantageEstimatorRegistry``.
The monitor is built at the first call: ``"grpo"`` declares the registry entry
``skyrl.grpo`` (Bessel std + 1e-6). Three steps run quietly on shuffled rows with SkyRL's
data-parallel padding rows (``pad0``) left out; then a custom ``"grpo"`` registered in
SkyRL's registry that divides by the batch's std instead of each group's is stopped with
``InvariantViolation`` before its advantages reach an update.

Run in a venv with SkyRL (``bash scripts/framework_venv.sh skyrl``):
``.venvs/skyrl/bin/python examples/skyrl_example.py`` (``--out DIR`` keeps the monitor's log in
``DIR/grpo-monitor/``; by default it goes to a temporary folder, removed at the end).
"""

from __future__ import annotations

import os

from _framework import output_folder, require_framework

require_framework("skyrl")  # not installed here: prints the command that builds its venv, exits 2

import numpy as np
import torch

from grpo_monitor import InvariantViolation
from grpo_monitor.integrations import skyrl as grpo_skyrl
from grpo_monitor.sinks.auto import LOG_DIR_ENV

grpo_skyrl.allow_python311()  # skyrl's own requirement below Python 3.12 (typing.TypedDict)
from omegaconf import OmegaConf  # noqa: E402
from skyrl.backends.skyrl_train.utils import ppo_utils  # noqa: E402

G, PROMPTS, T = 8, 4, 12
ALGORITHM = OmegaConf.create({"advantage_estimator": "grpo", "grpo_norm_by_std": True})


def batch(step: int):
    """token_level_rewards (0/1 on the last token), response_mask, uids: shuffled rows plus one padding row."""
    gen = torch.Generator().manual_seed(step)
    p = torch.rand(PROMPTS, 1, generator=gen).expand(PROMPTS, G).reshape(-1)
    scores = (torch.rand(PROMPTS * G, generator=gen) < p).float()
    scores[:G] = 0.0  # one prompt no response solves: a degenerate group
    lengths = torch.randint(2, T + 1, (PROMPTS * G,), generator=gen)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(PROMPTS * G, T)
    rewards[torch.arange(PROMPTS * G), lengths - 1] = scores
    uids = np.array([f"{step}-{i // G}" for i in range(PROMPTS * G)], dtype=object)
    perm = torch.randperm(PROMPTS * G, generator=gen)
    rewards, mask, uids = rewards[perm], mask[perm], uids[perm.numpy()]
    # RayPPOTrainer.pad_batch fills the last data-parallel shard with copies of the first rows, uid "pad0", ...
    return torch.cat([rewards, rewards[:1]]), torch.cat([mask, mask[:1]]), np.append(uids, "pad0")


def advantages(step: int):
    """What RayPPOTrainer.compute_advantages_and_returns runs."""
    rewards, mask, uids = batch(step)
    return ppo_utils.compute_advantages_and_returns(
        token_level_rewards=rewards, response_mask=mask, index=uids, adv_estimator=ALGORITHM.advantage_estimator,
        config=ALGORITHM, values=None, grpo_norm_by_std=ALGORITHM.grpo_norm_by_std, gamma=1.0, lambd=1.0)


def batch_std_grpo(token_level_rewards, response_mask, index, **kwargs):
    """A custom "grpo": SkyRL's centring, then the batch's std where each group's is meant."""
    centred, _ = ppo_utils.compute_grpo_outcome_advantage(token_level_rewards, response_mask, index,
                                                          grpo_norm_by_std=False)
    adv = centred / (token_level_rewards.sum(-1).std() + 1e-6)
    return adv, adv


def main() -> int:
    with output_folder(__doc__.splitlines()[0]) as out:
        os.environ[LOG_DIR_ENV] = str(out)  # no trainer config in reach: where sinks="auto" puts its JSONL log
        return run()


def run() -> int:
    attachment = grpo_skyrl.attach()  # the one line
    try:
        for step in range(3):
            advantages(step)
            report = attachment.reports[-1]
            m = report.metrics
            print(f"step {step}: {m['grpo/groups/total']:.0f} groups, degenerate rate "
                  f"{m['grpo/groups/degenerate_rate']:.2f}, estimator {report.convention}, "
                  f"violations {len(report.violations)}")
    finally:
        grpo_skyrl.detach()
    registry = ppo_utils.AdvantageEstimatorRegistry
    real = registry.get("grpo")
    registry.unregister("grpo")
    registry.register("grpo", batch_std_grpo)
    grpo_skyrl.attach(sinks=None)
    try:
        advantages(3)
        print("custom grpo: not stopped")
    except InvariantViolation as exc:
        print("custom grpo stopped:", ", ".join(sorted({v.invariant for v in exc.violations})))
    finally:
        grpo_skyrl.detach()
        registry.unregister("grpo")
        registry.register("grpo", real)
    print("detached:", "__grpo_monitor_original__" not in vars(ppo_utils.compute_advantages_and_returns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
