"""The universal invariants' own grouping agrees with the estimator families' (the reference), and the audit's
probe definitions tell a group-wise function from a misaligned or batch-wide one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from grpo_monitor.estimators.families import group_stats, layout
from grpo_monitor.invariants import INVARIANTS, probes
from grpo_monitor.invariants.universal import grouping, universal_breach


@pytest.mark.parametrize("seed", range(5), ids=lambda s: f"seed{s}")
def test_the_grouping_matches_the_families(seed):
    """Group index, scorable rows, rows per group and constant groups equal families.layout/group_stats on shuffled
    labels with NaN rewards, constant groups and a group whose rewards are all NaN."""
    rng = np.random.default_rng(seed)
    gid = rng.permutation(np.repeat(rng.choice(1000, 9, replace=False), rng.integers(1, 7, 9)))
    r = rng.integers(0, 3, len(gid)).astype(float)
    r[rng.random(len(gid)) < 0.2] = np.nan
    r[gid == gid[0]] = np.nan
    lay = layout(r, gid)
    st = group_stats(lay, r)
    inv, valid, n, degenerate = grouping(r, gid)
    assert (inv == lay.inv).all() and (valid == lay.valid).all()
    assert (n == st.n).all() and (degenerate == st.degenerate).all()


def test_a_universal_breach_names_the_falling_group():
    """Advantages falling as the reward rises in group 1 only: that group, whatever the labels."""
    r = np.array([0.0, 1.0, 0.0, 1.0])
    found = universal_breach(r, np.array([7, 7, 3, 3]), np.array([-1.0, 1.0, 1.0, -1.0]), monotone_tol=1e-3,
                             constant_tol=0.25)
    assert found is not None and found.groups == (0,)  # labels sorted: 3 is group 0


def _group_z(r: torch.Tensor) -> torch.Tensor:
    return (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)


def _rolled(r: torch.Tensor) -> torch.Tensor:
    return _group_z(r).roll(1, dims=1)


def _batch_baseline(r: torch.Tensor) -> torch.Tensor:
    return (r - r.mean()) / (r.std() + 1e-6)


REWARDS = torch.rand(12, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


@pytest.mark.parametrize("fn, equivariant, independent", [(_group_z, True, True), (_rolled, False, True),
                                                          (_batch_baseline, True, False)],
                         ids=["group-z-score", "misaligned", "batch-baseline"])
def test_probe_definitions(fn, equivariant, independent):
    """Permutation equivariance fails only on the misalignment, batch independence only on the batch baseline
    (float64: a sound function is equivariant to 1e-12; a broken one is off by O(1))."""
    assert (probes.equivariance_error(fn, REWARDS) < 1e-12) == equivariant
    assert (probes.batch_dependence(fn, REWARDS) < 1e-12) == independent
    if not equivariant:
        assert probes.equivariance_error(fn, REWARDS) > 0.1


def test_the_probes_are_not_run_invariants():
    """The audit's probe records stay out of INVARIANTS (policies= and docs/invariants.md do not name them)."""
    assert set(probes.PROBES) == {"permutation_equivariance"} and not set(probes.PROBES) & set(INVARIANTS)
