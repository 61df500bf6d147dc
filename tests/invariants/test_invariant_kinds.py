"""grpo_monitor.invariants: one registry from the kind modules, imported by the rest and importing none of it, and
each rollout invariant's device mask flags exactly the group built to break it."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch

import grpo_monitor.invariants as inv
from grpo_monitor.config import Tolerances
from grpo_monitor.estimators import PROMISES
from grpo_monitor.invariants import declared, estimator, rollout, tokens, trainer, weights
from grpo_monitor.stats.rollout import ROLLOUT_FIELDS, rollout_stats
from grpo_monitor.stats.segments import Segments

PACKAGE = Path(inv.__file__).parent
KINDS = (rollout, estimator, tokens, declared, weights, trainer)


def test_the_registry_is_the_kind_modules_records_in_order():
    """INVARIANTS (hence policies=, the docs table, the dashboards) is every kind module's RECORDS, in order."""
    assert list(inv.INVARIANTS.values()) == [r for kind in KINDS for r in kind.RECORDS]
    assert inv.GROUP_INVARIANTS == tuple(c.record.name for c in rollout.CHECKS)


def test_the_derived_sets_follow_the_records():
    """Promises, device promises and root causes are read off the records' fields."""
    records = list(inv.INVARIANTS.values())
    assert PROMISES == {**{r.name: r.promise for r in records if r.promise}, **estimator.JUDGE_PROMISES}
    assert set(inv.DEVICE_PROMISES) == {r.name for r in records if r.promise and r.side == "rollout"}
    assert set(inv.ROOT_CAUSES) == {"finite", "zero_group_mean", "affine_in_rewards"}


def test_the_package_imports_nothing_else_of_grpo_monitor():
    """Statistics, estimators, checks, config and the audit import it; it imports none of them (no cycle)."""
    outside = []
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level > 1 or (node.module or "").startswith("grpo_monitor")):
                outside.append(f"{path.name}: {'.' * node.level}{node.module}")
    assert outside == []


def test_every_group_invariant_is_counted_on_the_device():
    """Each rollout check's mask is summed into its own field of the reducible rollout vector."""
    assert {f"viol_{c.record.name}" for c in rollout.CHECKS} <= {name for name, _ in ROLLOUT_FIELDS}


def _zscores(r: np.ndarray) -> np.ndarray:
    """One group's population z-scores in float64 (NaN rewards: advantage 0, out of the statistics)."""
    mean, std = np.nanmean(r), np.nanstd(r)
    return np.where(np.isnan(r), 0.0, (r - mean) / (std + 1e-4) if std > 0 else 0.0)


def _broken_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, int]]:
    """Seven groups, each healthy (population z-scores, float64) but for the one defect built into it."""
    groups = [np.array(g) for g in ([0.0, 1.0, 1.0, 0.0], [0.2, 0.9, 0.4, 0.1], [0.0, 1.0, 0.5, 0.3], [0.7] * 4,
                                    [1.0, 0.0, np.nan, 1.0], [0.0, 1.0, 0.0], [1.0])]
    adv = [_zscores(g) for g in groups]
    adv[1] = adv[1] + 0.5            # group 1: a constant added (mean not 0)
    adv[2][[0, 1]] = adv[2][[1, 0]]  # group 2: two rows swapped (not increasing in the reward)
    adv[3] = adv[3] + 0.3            # group 3: a constant group carrying advantage
    adv[4][2] = 1.0                  # group 4: the NaN-reward row credited
    gid = torch.cat([torch.full((len(g),), i) for i, g in enumerate(groups)])  # group 6: a single row
    broken = {"zero_group_mean": 1, "affine_in_rewards": 2, "degenerate_zero": 3, "unscorable_rows": 4,
              "group_size": 6}
    return torch.from_numpy(np.concatenate(groups)), gid, torch.from_numpy(np.concatenate(adv)), broken


@pytest.mark.parametrize("name", ["zero_group_mean", "affine_in_rewards", "degenerate_zero", "unscorable_rows",
                                  "group_size", "finite"])
def test_each_mask_flags_the_group_built_to_break_it(name):
    """On the device: exactly the broken group is offending (none for finite: every value is finite)."""
    r, gid, a, broken = _broken_batch()
    vec, detail = rollout_stats(r, Segments(gid, 7), 7, a, Tolerances(), None)
    want = [g == broken.get(name) for g in range(7)]
    assert detail.offending[name].tolist() == want
    found = rollout.group_violations(dict(zip([n for n, _ in ROLLOUT_FIELDS], vec.tolist(), strict=True)),
                                     [(detail, [f"q{i}" for i in range(7)])], _Config(), 5)
    assert {v.invariant: v.groups for v in found}.get(name, ()) == ((f"q{broken[name]}",) if name in broken else ())


class _Config:
    """The two config fields a rollout breach message reads."""

    group_size = None
    tolerances = Tolerances()


@pytest.mark.parametrize("where", ["reward", "advantage"], ids=["infinite-reward", "nan-advantage"])
def test_the_finite_mask_flags_an_infinite_reward_or_a_nan_advantage(where):
    """``finite`` reads the reward statistics and, given advantages, the fit: either one flags its group."""
    r, gid, a, _ = _broken_batch()
    r, a = r.clone(), a.clone()
    (r if where == "reward" else a)[1] = np.inf if where == "reward" else np.nan
    _, detail = rollout_stats(r, Segments(gid, 7), 7, a, Tolerances(), None)
    assert detail.offending["finite"].tolist() == [True] + [False] * 6
