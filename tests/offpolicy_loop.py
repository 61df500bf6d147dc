"""An asynchronous loop for the off-policy family's tests: rows of several weights versions, stale ones dropped.

Each step trains on 8 groups of G=4 whose rows come from the last ``lag + 1`` weight versions
(policy_version), generates 4 more groups than it keeps and drops the stalest rows; with
``biased_from`` the drop takes the unsolved groups' rows from that step on (slow, hard
problems dropped: the selection bias the family flags).
"""

from __future__ import annotations

from pathlib import Path

import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.sinks import JSONLSink


def async_loop(log: Path, steps: int, *, lag: int = 3, biased_from: int | None = None, seed: int = 0,
               ages: list[torch.Tensor] | None = None) -> Path:
    """Write ``steps`` steps of an asynchronous run to the JSONL log ``log`` and return it; ``ages`` (if given)
    gets each step's per-row ages of the kept rows, as the loop drew them."""
    gen = torch.Generator().manual_seed(seed)
    B, G, extra = 8, 4, 4
    config = MonitorConfig(group_size=G, std_convention="population", max_policy_lag=lag,
                           repro_dir=str(log.parent / "repro"))
    monitor = GRPOMonitor(config, sinks=[JSONLSink(log)])
    try:
        for step in range(steps):
            n = B + extra
            p = torch.rand(n, 1, generator=gen, dtype=torch.float64) * 0.8 + 0.1
            rewards = (torch.rand(n, G, generator=gen, dtype=torch.float64) < p).double()
            age = torch.randint(0, min(lag, step) + 1, (n,), generator=gen)
            if biased_from is not None and step >= biased_from:
                score = rewards.sum(1) + 0.1 * torch.rand(n, generator=gen, dtype=torch.float64)  # unsolved first
            else:
                score = -age.double() + 0.1 * torch.rand(n, generator=gen, dtype=torch.float64)  # stalest first
            dropped_groups = torch.argsort(score)[:extra]
            dropped = torch.zeros(n, G, dtype=torch.bool)
            dropped[dropped_groups] = True
            monitor.observe_generation(rewards, dropped=dropped)
            kept = ~dropped[:, 0]
            versions = (step - age[kept])[:, None].expand(-1, G)
            if ages is not None:
                ages.append(step - versions.reshape(-1))
            r = rewards[kept]
            adv = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True, correction=0) + 1e-6)
            monitor.observe_rollout(r, advantages=adv, policy_version=versions, trained_version=step)
            monitor.end_step()
    finally:
        monitor.close()
    return log
