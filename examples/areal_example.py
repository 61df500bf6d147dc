"""grpo-monitor around AReaL's own advantage computation (AReaL 1.0.4, CPU, a few seconds).

``grpo_areal.attach()`` wraps ``PPOActor._compute_advantages``, which AReaL's PPO actor
runs once per training step (``compute_advantages``): reward scaling, ``reward_norm``
(group mean and std), KL shaping, GAE and ``adv_norm`` (token whitening). The monitor is
built at the first call from the actor's config: the GRPO recipe (reward_norm group/group,
adv_norm batch/batch, ``kl_ctl=0``) declares the registry entry ``areal.grpo``, replayed
exactly with each row's token count. Three steps run quietly; then an actor whose
``Normalization`` divides by the batch's std while its config says group std is stopped
with ``InvariantViolation`` before its advantages reach an update.

Run in a venv with AReaL (``bash scripts/framework_venv.sh areal``):
``.venvs/areal/bin/python examples/areal_example.py`` (``--out DIR`` keeps the monitor's log in
``DIR/grpo-monitor/``; by default it goes to a temporary folder, removed at the end).
"""

from __future__ import annotations

import os

from _framework import output_folder, require_framework

require_framework("areal")  # not installed here: prints the command that builds its venv, exits 2

import logging

import torch
from areal.api.cli_args import NormConfig, PPOActorConfig
from areal.trainer.ppo.actor import PPOActor
from areal.utils.data import Normalization

from grpo_monitor import InvariantViolation
from grpo_monitor.integrations import areal as grpo_areal
from grpo_monitor.sinks.auto import LOG_DIR_ENV

logging.disable(logging.INFO)  # PPOActor logs its configuration
G, PROMPTS, PROMPT_LEN, T = 8, 4, 3, 16


def grpo_actor() -> PPOActor:
    """AReaL's GRPO recipe (examples/math/gsm8k_grpo.yaml): group-normalised rewards, whitened advantages."""
    config = PPOActorConfig(
        experiment_name="grpo-monitor", trial_name="example", path="/nonexistent", kl_ctl=0.0,
        reward_norm=NormConfig(mean_level="group", std_level="group", group_size=G),
        adv_norm=NormConfig(mean_level="batch", std_level="batch"))
    return PPOActor(config, engine=None)  # _compute_advantages needs no engine


def batch(step: int) -> dict:
    """PROMPTS x G padded sequences (prompt, then response), groups in contiguous rows, 0/1 rewards."""
    gen = torch.Generator().manual_seed(step)
    n = PROMPTS * G
    p = torch.rand(PROMPTS, 1, generator=gen).expand(PROMPTS, G).reshape(-1)
    rewards = (torch.rand(n, generator=gen) < p).float()
    rewards[:G] = 1.0  # one prompt solved by every response: a degenerate group
    seqlen = PROMPT_LEN + torch.randint(2, T - PROMPT_LEN, (n,), generator=gen)
    pos = torch.arange(T)[None, :]
    return {"input_ids": torch.zeros(n, T, dtype=torch.long), "rewards": rewards,
            "attention_mask": (pos < seqlen[:, None]).long(),
            "loss_mask": ((pos >= PROMPT_LEN) & (pos < seqlen[:, None])).long(),
            "logprobs": -torch.rand(n, T, generator=gen)}


def main() -> int:
    with output_folder(__doc__.splitlines()[0]) as out:
        os.environ[LOG_DIR_ENV] = str(out)  # no trainer config in reach: where sinks="auto" puts its JSONL log
        return run()


def run() -> int:
    attachment = grpo_areal.attach()  # the one line
    try:
        actor = grpo_actor()
        for step in range(3):
            actor._compute_advantages(batch(step))  # what PPOActor.compute_advantages runs
            report = attachment.reports[-1]
            m = report.metrics
            print(f"step {step}: {m['grpo/groups/total']:.0f} groups, degenerate rate "
                  f"{m['grpo/groups/degenerate_rate']:.2f}, estimator {report.convention}, "
                  f"violations {len(report.violations)}")
    finally:
        grpo_areal.detach()
    broken = grpo_actor()
    broken.reward_norm = Normalization(NormConfig(mean_level="group", std_level="batch", group_size=G))
    grpo_areal.attach(sinks=None)
    try:
        broken._compute_advantages(batch(3))
        print("batch-std actor: not stopped")
    except InvariantViolation as exc:
        print("batch-std actor stopped:", ", ".join(sorted({v.invariant for v in exc.violations})))
    finally:
        grpo_areal.detach()
    print("detached:", "__grpo_monitor_original__" not in vars(PPOActor._compute_advantages))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
