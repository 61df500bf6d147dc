"""Stable estimator ids: every registry entry keeps the integer id dashboards have logged for it."""

from __future__ import annotations

import numpy as np
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.estimators import CUSTOM_ID, ESTIMATOR_IDS, ESTIMATORS, UNKNOWN_ID, custom, id_of, name_of

#: The ids as released: a copy, so that renumbering (an inserted entry, a reordered table) fails here.
RELEASED = {
    "population": 0, "bessel": 1, "none": 2, "leave_one_out": 3, "batch": 4, "trl.group": 5, "trl.batch": 6,
    "trl.none": 7, "trl.normalize_then_sum": 8, "verl.grpo": 9, "verl.grpo_vectorized": 10, "verl.grpo_no_std": 11,
    "verl.rloo": 12, "verl.rloo_vectorized": 13, "verl.reinforce_plus_plus_baseline": 14, "verl.gpg": 15,
    "verl.grpo_passk": 16, "verl.grpo_passk_no_std": 17, "nemo_rl.grpo": 18, "nemo_rl.grpo_no_loo": 19,
    "openrlhf.group_norm": 20, "openrlhf.rloo": 21, "openrlhf.reinforce_baseline": 22, "openrlhf.dr_grpo": 23,
    "areal.grpo": 24, "areal.dr_grpo": 25, "roll.reward_norm": 26, "roll.grpo": 27, "skyrl.grpo": 28,
    "skyrl.maxrl": 29, "open_instruct.standard": 30, "open_instruct.centered": 31,
}


def test_released_ids_never_change():
    """Every id released keeps its entry; the classic five are 0-4."""
    for name, i in RELEASED.items():
        assert ESTIMATOR_IDS[name] == i and ESTIMATORS[name].id == i, name
    assert [ESTIMATOR_IDS[n] for n in ("population", "bessel", "none", "leave_one_out", "batch")] == [0, 1, 2, 3, 4]


def test_ids_are_unique_and_every_entry_has_one():
    """No two entries share an id, no id is negative, and lookups go both ways."""
    ids = [e.id for e in ESTIMATORS.values()]
    assert len(set(ids)) == len(ids) and min(ids) >= 0
    assert set(ESTIMATOR_IDS) == set(ESTIMATORS)
    assert all(name_of(e.id) == n for n, e in ESTIMATORS.items())


def test_the_logged_id_is_the_stable_id_not_a_position():
    """grpo/adv/convention_id logs the entry's id (-2 for a user's own, -1 for none)."""
    rng = np.random.default_rng(0)
    r = (rng.random((8, 4)) < 0.5).astype(np.float64)
    gid = np.repeat(np.arange(8), 4)
    for name in ("verl.grpo", "open_instruct.centered"):
        a = ESTIMATORS[name](r.reshape(-1), gid).reshape(8, 4)
        mon = GRPOMonitor(MonitorConfig(group_size=4, std_convention=name))
        mon.observe_rollout(torch.from_numpy(r), advantages=torch.from_numpy(a))
        assert mon.end_step().metrics["grpo/adv/convention_id"] == RELEASED[name]
    mine = custom(lambda x: x - x.mean(1, keepdim=True), name="ids.mine")
    assert id_of(mine.name) == CUSTOM_ID == -2 and id_of(None) == UNKNOWN_ID == -1
