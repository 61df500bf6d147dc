"""A breach file carries everything the live check used, so ``replay`` judges the step as the live check did."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig, load_repro, replay
from grpo_monitor.estimators import ESTIMATORS
from grpo_monitor.repro.save import FORMAT

G, B = 4, 6


def _whitened_batch(seed: int = 0):
    """AReaL's default (group z-score, then whitening over tokens) on continuous rewards, with token counts."""
    rng = np.random.default_rng(seed)
    rewards = rng.uniform(0, 1, size=(B, G)).round(3)
    lengths = rng.integers(5, 200, size=B * G)
    gid = np.repeat(np.arange(B), G)
    adv = ESTIMATORS["areal.grpo"](rewards.reshape(-1), gid, lengths=lengths).reshape(B, G)
    return rewards, adv, lengths


def _signature(violations):
    return sorted((v.invariant, v.severity, tuple(v.groups)) for v in violations)


@pytest.mark.parametrize("bug", ["rows_swapped", "sign_flipped"])
def test_a_token_whitening_breach_replays_exactly_as_live(tmp_path, bug):
    """Declared with lengths, the saved file replays to the live step's violations, groups and severities."""
    rewards, adv, lengths = _whitened_batch()
    if bug == "rows_swapped":
        adv[2, [0, 1]] = adv[2, [1, 0]]
    else:
        adv[4] = -adv[4]
    mon = GRPOMonitor(MonitorConfig(group_size=G, std_convention="areal.grpo", repro_dir=str(tmp_path)))
    with pytest.raises(InvariantViolation) as info:
        mon.observe_rollout(torch.tensor(rewards), advantages=torch.tensor(adv), lengths=torch.tensor(lengths))
    live = info.value.violations
    path = live[0].repro_path
    assert path is not None
    data = load_repro(path)
    assert data["format"] == FORMAT
    assert torch.equal(data["rollouts"][0]["lengths"], torch.tensor(lengths).double().reshape(-1))
    errors = [v for v in live if v.severity == "error"]
    assert _signature(replay(path).violations) == _signature(errors) != []


def test_whitening_over_rows_instead_of_tokens_replays_as_the_breach_it_was(tmp_path):
    """The bug only the token counts reveal (whitening over rows, not tokens) replays as an error, not quiet.

    Without the saved lengths (format 1) the replay fitted the whitening's offset and scale
    freely and found nothing; the live check had raised ``convention``.
    """
    rewards, _, lengths = _whitened_batch(1)
    gid = np.repeat(np.arange(B), G)
    adv = ESTIMATORS["areal.grpo"](rewards.reshape(-1), gid, lengths=None).reshape(B, G)  # every row weighs 1
    mon = GRPOMonitor(MonitorConfig(group_size=G, std_convention="areal.grpo", repro_dir=str(tmp_path)))
    with pytest.raises(InvariantViolation) as info:
        mon.observe_rollout(torch.tensor(rewards), advantages=torch.tensor(adv), lengths=torch.tensor(lengths))
    live = info.value.violations
    assert [v.invariant for v in live] == ["convention"]
    path = live[0].repro_path
    assert _signature(replay(path).violations) == _signature(live)
    data = load_repro(path)
    data["rollouts"][0]["lengths"] = None  # what a format 1 file held
    torch.save(data, tmp_path / "format1.pt")
    assert replay(str(tmp_path / "format1.pt")).violations == []
