"""The staleness_bias finding in a real monitor loop: dropping the slowest rows when the delay depends on the reward
opens it, a random drop of the same share (rows or whole groups) never does."""

from __future__ import annotations

import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig

PROMPTS, G, STEPS, SEEDS = 32, 8, 12, 5


def _step(mon: GRPOMonitor, gen: torch.Generator, step: int, drop: str) -> set[str]:
    """One asynchronous step: generate, drop a quarter of the rows (too stale), train on the rest."""
    p = torch.rand(PROMPTS, 1, generator=gen).expand(PROMPTS, G)
    rewards = (torch.rand(PROMPTS, G, generator=gen) < p).double()
    failed = (rewards == 0).double()
    lengths = torch.exp(torch.randn(PROMPTS, G, generator=gen, dtype=torch.float64) * 0.5 + 5 + 0.3 * failed)
    if drop == "delay ~ reward":  # failed (hard) generations take twice as long: the oldest rows are the hard ones
        delay = -torch.log(torch.rand(PROMPTS, G, generator=gen, dtype=torch.float64)) * (1 + failed)
        dropped = delay > delay.quantile(0.75)
    elif drop == "random rows":
        dropped = torch.rand(PROMPTS, G, generator=gen) < 0.25
    else:
        dropped = (torch.rand(PROMPTS, 1, generator=gen) < 0.25).expand(PROMPTS, G)
    mon.observe_generation(rewards, lengths=lengths.round(), dropped=dropped)
    gid = torch.arange(PROMPTS).repeat_interleave(G).reshape(PROMPTS, G)
    kept = ~dropped & (((~dropped).sum(1, keepdim=True)) >= 2)  # a group left with one row is not trained on
    versions = step - torch.randint(0, 2, (int(kept.sum()),), generator=gen)
    mon.observe_rollout(rewards[kept], group_ids=gid[kept], policy_version=versions, trained_version=step)
    report = mon.end_step()
    return {f.name for f in report.health.active} if report.health is not None else set()


def _run(seed: int, drop: str) -> list[set[str]]:
    mon = GRPOMonitor(MonitorConfig(defer_checks=True))  # no group_size: the kept groups are partial
    gen = torch.Generator().manual_seed(seed)
    return [_step(mon, gen, step, drop) for step in range(STEPS)]


@pytest.mark.parametrize("seed", range(SEEDS))
def test_a_reward_dependent_drop_is_flagged(seed):
    """Every seed: the finding opens within the first steps and stays open."""
    active = _run(seed, "delay ~ reward")
    opened = [i for i, names in enumerate(active) if "staleness_bias" in names]
    assert opened and opened[0] <= 4 and opened == list(range(opened[0], STEPS)), opened


@pytest.mark.parametrize("drop", ["random rows", "random groups"])
def test_a_random_drop_is_not_flagged(drop):
    """Over every seed and step, a drop that ignores the rows never opens it."""
    flagged = [(seed, i) for seed in range(SEEDS) for i, names in enumerate(_run(seed, drop))
               if "staleness_bias" in names]
    assert flagged == []
