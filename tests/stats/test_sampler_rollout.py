"""Truncation and the degenerate split against a group-by-group float64 numpy reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.step.inputs import InputValueError
from sampler_references import split_reference

SPLIT = ("grpo/groups/degenerate_", "grpo/rows/truncated_rate", "grpo/rows/length_")


def split_metrics(report) -> dict[str, float]:
    return {k: v for k, v in report.metrics.items() if k.startswith(SPLIT) and k != "grpo/groups/degenerate_rate"}


def rollout(seed: int, B: int = 16, G: int = 4, kind: str = "binary", max_len: int = 20) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if kind == "binary":
        r = (rng.random((B, G)) < rng.random((B, 1))).astype(float)
    elif kind == "pm1":  # DAPO's -1 / +1
        r = np.where(rng.random((B, G)) < 0.5, -1.0, 1.0)
        r[:3] = -1.0
        r[3:5] = 1.0
    else:  # graded rewards: degenerate groups at the ends and in the middle
        r = rng.integers(0, 5, (B, G)) / 4
        r[0], r[1], r[2] = 0.0, 1.0, 0.5
    r[5, 1] = math.nan  # an unscorable row
    r[6] = math.nan  # a group with no scorable row
    lengths = rng.integers(1, max_len + 1, (B, G))
    lengths[0] = max_len  # a degenerate group cut at the limit
    return dict(rewards=r, lengths=lengths, truncated=lengths >= max_len)


@pytest.mark.parametrize("kind", ["binary", "pm1", "graded"])
@pytest.mark.parametrize("seed", range(3))
def test_split_and_truncation_match_the_reference(kind, seed):
    """Every truncation and split key equals the group-by-group reference; low + high + other = degenerate."""
    x = rollout(seed, kind=kind)
    mon = GRPOMonitor(MonitorConfig(group_size=4, strict=True))
    mon.observe_rollout(torch.tensor(x["rewards"]), lengths=torch.tensor(x["lengths"]),
                        truncated=torch.tensor(x["truncated"]))
    report = mon.end_step()
    want = split_reference(x["rewards"], x["truncated"], x["lengths"])
    assert split_metrics(report) == pytest.approx(want, rel=1e-12)
    parts = sum(report.metrics[f"grpo/groups/degenerate_{p}_rate"] for p in ("low", "high", "other"))
    assert parts == pytest.approx(report.metrics["grpo/groups/degenerate_rate"], abs=1e-12)


def test_several_rollout_calls_and_shuffled_groups_merge():
    """Two observe_rollout calls in a step (and interleaved group ids) give the keys of the whole batch."""
    x = rollout(4, B=12, kind="graded")
    r, ln, cut = x["rewards"], x["lengths"], x["truncated"]
    mon = GRPOMonitor(MonitorConfig(group_size=4, strict=True))
    for part in (slice(0, 5), slice(5, 12)):
        flat = r[part].reshape(-1)
        gids = np.repeat(np.arange(len(r[part])), 4)
        order = np.random.default_rng(1).permutation(len(flat))  # rows out of group order
        mon.observe_rollout(torch.tensor(flat[order]), group_ids=torch.tensor(gids[order]),
                            lengths=torch.tensor(ln[part].reshape(-1)[order]),
                            truncated=torch.tensor(cut[part].reshape(-1)[order]))
    assert split_metrics(mon.end_step()) == pytest.approx(split_reference(r, cut, ln), rel=1e-12)


def test_truncation_from_lengths_and_the_declared_limit():
    """Without truncated=, rows whose length reaches max_response_length are truncated; no limit: no keys."""
    x = rollout(2)
    for limit, expect in ((20, True), (None, False)):
        mon = GRPOMonitor(MonitorConfig(group_size=4, strict=True, max_response_length=limit))
        mon.observe_rollout(torch.tensor(x["rewards"]), lengths=torch.tensor(x["lengths"]))
        got = split_metrics(mon.end_step())
        assert ("grpo/rows/truncated_rate" in got) is expect
        if expect:
            assert got["grpo/rows/truncated_rate"] == pytest.approx(float(np.mean(x["lengths"] >= 20)))


def test_bad_truncated_is_the_users_error():
    """truncated with other values than 0/1, or misaligned, names the argument."""
    mon = GRPOMonitor(MonitorConfig(group_size=2, strict=True))
    with pytest.raises(InputValueError, match="truncated must be bool"):
        mon.observe_rollout(torch.tensor([[1.0, 0.0]]), truncated=torch.tensor([[2, 0]]))
    with pytest.raises(InputValueError, match="truncated has shape"):
        mon.observe_rollout(torch.tensor([[1.0, 0.0]]), truncated=torch.tensor([True, False, True]))
