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
    assert _signature(replay(path).violations) == _signature(live) != []


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


def test_a_multi_reward_breach_replays_with_its_reward_components(tmp_path):
    """The reward components and weights are saved: trl.normalize_then_sum's breach replays as live, not quiet."""
    rng = np.random.default_rng(2)
    k, w = 2, (1.0, 0.5)
    comps = rng.uniform(0, 1, size=(B * G, k)).round(3)
    adv = ESTIMATORS["trl.normalize_then_sum"](comps, np.repeat(np.arange(B), G), weights=w).reshape(B, G)
    adv[2, [0, 1]] = adv[2, [1, 0]]
    mon = GRPOMonitor(MonitorConfig(group_size=G, std_convention="trl.normalize_then_sum", repro_dir=str(tmp_path)))
    with pytest.raises(InvariantViolation) as info:
        mon.observe_rollout(torch.tensor((comps @ np.array(w)).reshape(B, G)), advantages=torch.tensor(adv),
                            reward_components=torch.tensor(comps.reshape(B, G, k)), reward_weights=torch.tensor(w))
    live = info.value.violations
    assert [v.invariant for v in live] == ["convention"]
    assert _signature(replay(live[0].repro_path).violations) == _signature(live)


@pytest.mark.parametrize("ids", ["strings", "unsorted_ints", "tensor", "questions"])
def test_a_replay_names_the_groups_as_the_live_check_did(tmp_path, ids):
    """Flat rewards with the trainer's group ids (verl's uid strings, ints, a tensor) or question ids: the
    replay's violations name the same groups, in the same order, as the live ones."""
    rewards, adv, lengths = _whitened_batch(3)
    adv[1], adv[4] = -adv[1], -adv[4]
    order = [5, 3, 0, 4, 1, 2]  # groups named out of order
    per_row = [order[g] for g in range(B) for _ in range(G)]
    extra = {"strings": {"group_ids": [f"uid-{x}" for x in per_row]}, "unsorted_ints": {"group_ids": per_row},
             "tensor": {"group_ids": torch.tensor(per_row)},
             "questions": {"group_ids": per_row, "question_ids": [f"q{g}" for g in range(B)]}}[ids]
    mon = GRPOMonitor(MonitorConfig(std_convention="areal.grpo", repro_dir=str(tmp_path)))
    with pytest.raises(InvariantViolation) as info:
        mon.observe_rollout(torch.tensor(rewards.reshape(-1)), advantages=torch.tensor(adv.reshape(-1)),
                            lengths=torch.tensor(lengths), **extra)
    live = info.value.violations
    assert all(len(v.groups) == 2 for v in live) and live
    assert [(v.invariant, v.groups) for v in replay(live[0].repro_path).violations] == \
        [(v.invariant, v.groups) for v in live]


def test_a_token_breach_says_its_file_holds_no_token_tensors(tmp_path):
    """Token tensors are summed on the device, never kept: a mask breach's file holds the step's config and
    rollouts, and its message says so instead of promising the offending tensors."""
    mon = GRPOMonitor(MonitorConfig(group_size=G, repro_dir=str(tmp_path)))
    mask = torch.ones(2 * G, 5)
    mask[0, 0] = 0.5
    rewards, adv, lengths = _whitened_batch()
    mon.observe_rollout(torch.tensor(rewards[:2]), advantages=torch.tensor(ESTIMATORS["population"](
        rewards[:2].reshape(-1), np.repeat(np.arange(2), G)).reshape(2, G)))
    mon.observe_loss(mask=mask, logprobs=torch.zeros(2 * G, 5))
    with pytest.raises(InvariantViolation) as info:
        mon.end_step()
    (v,) = info.value.violations
    assert v.invariant == "mask_binary" and v.repro_path is not None
    assert "no token tensors" in v.message() and "Offending tensors" not in v.message()
    assert len(load_repro(v.repro_path)["rollouts"]) == 1
