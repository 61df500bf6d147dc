"""grpo_monitor.stats.rollout, .conventions and .fields: the reducible rollout vector."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from grpo_monitor.config import Tolerances
from grpo_monitor.stats.conventions import (
    CONVENTIONS,
    convention_base,
    scale_factor,
    stabilizer_range,
    stabilizer_residuals,
)
from grpo_monitor.stats.fields import FieldLayout
from grpo_monitor.stats.rollout import GROUP_INVARIANTS, ROLLOUT_FIELDS, rollout_stats
from grpo_monitor.stats.segments import Segments
from references import advantages

LAYOUT = FieldLayout(ROLLOUT_FIELDS)


def population_batch(seed: int, B: int = 50, G: int = 4, eps: float = 1e-4):
    """Binary rewards (B, G) in float64 and population z-score advantages."""
    rng = np.random.default_rng(seed)
    r = (rng.random((B, G)) < rng.random((B, 1))).astype(np.float64)
    return r, advantages(torch.from_numpy(r), "population", eps).numpy()


def stats_dict(r: np.ndarray, a: np.ndarray | None, group_size=None) -> dict[str, float]:
    B, G = r.shape
    vec, _ = rollout_stats(torch.from_numpy(r.reshape(-1)), Segments.blocks(B, G), B,
                           None if a is None else torch.from_numpy(a.reshape(-1)), Tolerances(), group_size)
    return LAYOUT.to_dict(vec.tolist())


def test_field_layout_is_complete():
    """Every group invariant has a breach-count slot and every convention a stabilizer range."""
    names = {n for n, _ in ROLLOUT_FIELDS}
    assert {f"viol_{i}" for i in GROUP_INVARIANTS} <= names
    assert {f"e_{c}_{m}" for c in CONVENTIONS for m in ("min", "max")} <= names
    assert len(names) == len(ROLLOUT_FIELDS)


def test_rollout_fields_match_numpy():
    """Counts and sums of one batch equal their numpy definitions."""
    r, a = population_batch(0)
    v = stats_dict(r, a)
    live = r.std(1) > 0
    assert v["groups"] == 50 and v["rows"] == 200 and v["scorable_rows"] == 200
    assert v["live"] == live.sum() and v["degenerate"] == (~live).sum()
    assert v["reward_sum"] == r.sum()
    assert v["question_std_sum"] == pytest.approx(r.std(1).sum(), rel=1e-12)
    assert v["adv_rows"] == 200 and v["adv_sum"] == pytest.approx(a.sum(), abs=1e-9)
    assert v["adv_sq_sum"] == pytest.approx((a * a).sum(), rel=1e-12)
    assert v["live_adv_std_sum"] == pytest.approx(a[live].std(1).sum(), rel=1e-12)
    assert all(v[f"viol_{i}"] == 0 for i in GROUP_INVARIANTS)


def test_merging_two_calls_equals_one_call():
    """Combining the vectors of two halves gives the vector of the whole batch (sums, minima, maxima)."""
    r, a = population_batch(1, B=60)
    whole = stats_dict(r, a)
    vec1, _ = rollout_stats(torch.from_numpy(r[:25].reshape(-1)), Segments.blocks(25, 4), 25,
                            torch.from_numpy(a[:25].reshape(-1)), Tolerances(), None)
    vec2, _ = rollout_stats(torch.from_numpy(r[25:].reshape(-1)), Segments.blocks(35, 4), 35,
                            torch.from_numpy(a[25:].reshape(-1)), Tolerances(), None)
    merged = LAYOUT.to_dict(LAYOUT.combine(vec1, vec2).tolist())
    for name, _op in ROLLOUT_FIELDS:
        if name == "typ_abs_adv":  # a median does not merge; the max of the parts is kept
            continue
        assert merged[name] == pytest.approx(whole[name], rel=1e-12, abs=1e-12), name


def test_rewards_only_leave_advantage_fields_empty():
    """Without advantages the advantage slots keep their identity values (0, +inf, -inf)."""
    v = stats_dict(*population_batch(2)[:1], None)
    assert v["adv_rows"] == 0 and v["e_population_min"] == math.inf and v["e_population_max"] == -math.inf


@pytest.mark.parametrize(
    "name, expected",
    [("population", [0.5, 0.25]), ("bessel", [0.5 * math.sqrt(4 / 3), 0.25 * math.sqrt(2)]), ("none", [1.0, 1.0]),
     ("leave_one_out", [0.75, 0.5]), ("batch", [0.0, 0.0])],
)
def test_convention_base(name, expected):
    """The part of 1/k each convention explains: std, Bessel std, 1, (n-1)/n, 0."""
    got = convention_base(name, torch.tensor([0.5, 0.25], dtype=torch.float64),
                          torch.tensor([4.0, 2.0], dtype=torch.float64))
    assert got.tolist() == pytest.approx(expected, rel=1e-15)


def test_stabilizer_range_equals_residual_extremes():
    """The batched range equals min/max of stabilizer_residuals over the masked groups."""
    gen = torch.Generator().manual_seed(0)
    slope = torch.rand(30, generator=gen, dtype=torch.float64) + 0.5
    std, n = torch.rand(30, generator=gen, dtype=torch.float64), torch.full((30,), 8.0, dtype=torch.float64)
    mask = torch.rand(30, generator=gen) < 0.7
    lo, hi = stabilizer_range(slope, std, n, mask)
    for i, (name, e) in enumerate(stabilizer_residuals(slope, std, n).items()):
        assert CONVENTIONS[i] == name
        assert lo[i].item() == e[mask].min().item() and hi[i].item() == e[mask].max().item()


@pytest.mark.parametrize("G", [2, 4, 8, 16, 32])
def test_scale_factor_is_the_live_advantage_std(G):
    """Population z-scores have std 1; Bessel ones sqrt((G-1)/G) (0.866 at G=4: seed 002 section 2, not 1.155)."""
    r = np.zeros((1, G))
    r[0, : G // 2] = 1.0
    a_pop = (r - r.mean()) / r.std()
    a_bes = (r - r.mean()) / r.std(ddof=1)
    assert scale_factor("population", G) == pytest.approx(a_pop.std(), rel=1e-12)
    assert scale_factor("bessel", G) == pytest.approx(a_bes.std(), rel=1e-12)
    if G == 4:
        assert scale_factor("bessel", 4) == pytest.approx(0.8660, abs=1e-4)
    with pytest.raises(ValueError, match="depends on the rewards"):
        scale_factor("batch", G)


def test_group_size_offenders():
    """A declared size flags groups of another size; a group of one is flagged even undeclared."""
    r = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.5], dtype=torch.float64)
    gid = torch.tensor([0, 0, 0, 1, 1, 2])
    _, detail = rollout_stats(r, Segments(gid, 3), 3, None, Tolerances(), None)
    assert detail.offending["group_size"].tolist() == [False, False, True]
    _, detail = rollout_stats(r, Segments(gid, 3), 3, None, Tolerances(), 3)
    assert detail.offending["group_size"].tolist() == [False, True, True]
