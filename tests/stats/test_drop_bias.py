"""The staleness drop's selection bias (observe_generation(dropped=)): float64 reference, calls merged, calibration."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.stats.drop_bias import Z_FLAG, drop_fields, drop_metrics
from grpo_monitor.stats.segments import Segments
from grpo_monitor.step.inputs import InputTypeError, InputValueError

G = 8


def generated(seed: int, groups: int = 48, biased: bool = False) -> dict[str, torch.Tensor]:
    """Prompts of pass probability p ~ U(0, 1), 0/1 rewards, longer failed rows; drops random (a quarter of the
    rows) or by a delay twice as long on failed rows (the slowest quarter dropped)."""
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(groups, 1, generator=g).expand(groups, G)
    rewards = (torch.rand(groups, G, generator=g) < p).double()
    lengths = torch.exp(torch.randn(groups, G, generator=g, dtype=torch.float64) * 0.5 + 5 + 0.3 * (1 - rewards))
    if biased:
        delay = -torch.log(torch.rand(groups, G, generator=g, dtype=torch.float64)) * (1 + (rewards == 0).double())
        dropped = delay > delay.quantile(0.75)
    else:
        dropped = torch.rand(groups, G, generator=g) < 0.25
    return dict(rewards=rewards, lengths=lengths.round(), dropped=dropped)


def reference(calls: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    """Per side: the mean, and its CR1 cluster-robust variance from each group's residual sum, in float64 numpy."""
    groups = [(c["rewards"][i].numpy(), c["lengths"][i].numpy(), c["dropped"][i].numpy())
              for c in calls for i in range(len(c["rewards"]))]
    out: dict[str, float] = {}
    n_drop = sum(d.sum() for _, _, d in groups)
    out["grpo/offpolicy/dropped_frac"] = n_drop / sum(d.size for _, _, d in groups)
    zs = {}
    for q, pick in (("reward", lambda r, n: r), ("pass", lambda r, n: (r > 0) * 1.0), ("length", lambda r, n: n)):
        stats = []
        for side in (True, False):
            xs = [pick(r, n)[d == side] for r, n, d in groups if (d == side).any()]
            m = np.concatenate(xs).mean()
            c = len(xs)
            var = sum(((x - m).sum()) ** 2 for x in xs) / sum(x.size for x in xs) ** 2 * c / (c - 1)
            stats.append((m, var))
            if q == "reward":
                out["grpo/offpolicy/dropped_reward_mean" if side else "grpo/offpolicy/kept_reward_mean"] = m
        zs[q] = (stats[0][0] - stats[1][0]) / math.sqrt(stats[0][1] + stats[1][1])
        out[f"grpo/offpolicy/drop_{q}_z"] = zs[q]
    out["grpo/offpolicy/drop_bias_z"] = max(abs(z) for z in zs.values())
    out["grpo/offpolicy/drop_biased"] = float(out["grpo/offpolicy/drop_bias_z"] > Z_FLAG)
    return out


@pytest.mark.parametrize("biased", [False, True], ids=["random drop", "reward-dependent delay"])
def test_keys_match_float64_over_two_calls(biased):
    """Two observe_generation calls (two generation rounds) give the float64 keys of their union."""
    calls = [generated(1, biased=biased), generated(2, groups=20, biased=biased)]
    mon = GRPOMonitor(MonitorConfig(group_size=G))
    for c in calls:
        mon.observe_generation(c["rewards"], lengths=c["lengths"], dropped=c["dropped"])
    mon.observe_rollout(calls[0]["rewards"][:4])
    got = mon.end_step().metrics
    for key, value in reference(calls).items():
        assert got[key] == pytest.approx(float(value), rel=1e-9, abs=1e-12), key
    assert got["grpo/offpolicy/drop_biased"] == float(biased)


def test_random_drops_are_quiet_and_reward_dependent_ones_flagged():
    """Over 400 random drops (rows, then whole groups) at most 4 flags (calibration: 0.07% and 0.6%); a
    reward-dependent delay is flagged in at least 85 of 100 steps (calibration: 94%); 64 prompts of 8 rows."""
    def flagged(seed: int, biased: bool, whole_groups: bool = False) -> float:
        x = generated(seed, groups=64, biased=biased)
        if whole_groups:
            x["dropped"] = x["dropped"][:, :1].expand(-1, G)
        v = drop_fields(x["rewards"].reshape(-1), x["dropped"].reshape(-1), x["lengths"].reshape(-1),
                        Segments.blocks(len(x["rewards"]), G))
        return drop_metrics({k: float(t) for k, t in v.items()})["grpo/offpolicy/drop_biased"]

    assert sum(flagged(s, False) for s in range(200)) + sum(flagged(s, False, True) for s in range(200, 400)) <= 4
    assert sum(flagged(s, True) for s in range(400, 500)) >= 85


def test_few_dropped_rows_give_means_without_a_test():
    """Under 8 dropped rows: the share and the means, no z (too few rows to call a bias)."""
    x = generated(3)
    x["dropped"] = torch.zeros_like(x["dropped"])
    x["dropped"][0, :3] = True
    mon = GRPOMonitor(MonitorConfig(group_size=G))
    mon.observe_generation(x["rewards"], dropped=x["dropped"])
    got = mon.end_step().metrics
    assert got["grpo/offpolicy/dropped_frac"] == pytest.approx(3 / x["dropped"].numel())
    assert "grpo/offpolicy/drop_bias_z" not in got


@pytest.mark.parametrize("dropped, error, message", [
    (torch.zeros(48, G), InputTypeError, "dropped must be a bool per row"),
    (torch.zeros(5, dtype=torch.bool), InputValueError, "dropped has shape (5,)"),
], ids=["float flags", "misaligned"])
def test_bad_dropped_is_named(dropped, error, message):
    """A float or misaligned dropped= raises the user's error naming it."""
    mon = GRPOMonitor(MonitorConfig(group_size=G))
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        mon.observe_generation(generated(0)["rewards"], dropped=dropped)
