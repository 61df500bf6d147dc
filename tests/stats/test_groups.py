"""grpo_monitor.stats.groups and .segments: per-group statistics against float64 references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from grpo_monitor.stats.groups import advantage_fit, degenerate_blocks, group_reward_stats, typical_abs_advantage
from grpo_monitor.stats.segments import Segments, segment_max, segment_min, segment_sum

# ------------------------------------------------------------------ references


def reference_groups(rewards: np.ndarray, gid: np.ndarray, num_groups: int) -> dict[str, np.ndarray]:
    """Per-group statistics with a Python loop over groups, NaN rows left out (float64)."""
    out = {k: np.zeros(num_groups) for k in ("rows", "n", "mean", "std", "sum")}
    out["degenerate"] = np.zeros(num_groups, dtype=bool)
    for g in range(num_groups):
        r = rewards[gid == g]
        ok = r[~np.isnan(r)]
        out["rows"][g], out["n"][g], out["sum"][g] = len(r), len(ok), ok.sum()
        out["mean"][g] = ok.mean() if len(ok) else 0.0
        out["std"][g] = ok.std() if len(ok) else 0.0
        out["degenerate"][g] = len(set(ok.tolist())) <= 1
    return out


def reference_fit(adv: np.ndarray, rewards: np.ndarray, gid: np.ndarray, num_groups: int) -> dict[str, np.ndarray]:
    """Per-group least squares a = k (r - mean) + b on scorable rows, via numpy.linalg.lstsq."""
    out = {k: np.full(num_groups, np.nan) for k in ("slope", "intercept", "resid_rms", "adv_std", "abs_max",
                                                    "unscorable")}
    for g in range(num_groups):
        r, a = rewards[gid == g], adv[gid == g]
        ok = ~np.isnan(r)
        c = r[ok] - r[ok].mean()
        out["intercept"][g] = a[ok].mean()
        out["adv_std"][g] = a[ok].std()
        out["abs_max"][g] = np.abs(a[ok]).max()
        out["unscorable"][g] = np.abs(a[~ok]).max() if (~ok).any() else 0.0
        if len(set(r[ok].tolist())) > 1:
            design = np.stack([c, np.ones_like(c)], axis=1)
            (k, b), *_ = np.linalg.lstsq(design, a[ok], rcond=None)
            out["slope"][g] = k
            out["resid_rms"][g] = np.sqrt(np.mean((a[ok] - k * c - b) ** 2))
        else:  # no slope to fit: the residual is the spread around the group mean
            out["resid_rms"][g] = a[ok].std()
    return out


def random_batch(seed: int, num_groups: int = 40, G: int = 6, nan_frac: float = 0.1, shuffle: bool = True):
    """Binary-and-continuous rewards with NaN rows, advantages a noisy affine function, shuffled rows."""
    rng = np.random.default_rng(seed)
    rewards = np.where(rng.random((num_groups, G)) < 0.5, rng.integers(0, 2, (num_groups, G)),
                       rng.random((num_groups, G)))
    rewards = rewards.astype(np.float64)
    rewards[rng.random((num_groups, G)) < nan_frac] = np.nan
    rewards[0] = 0.25  # one all-equal group
    adv = 1.7 * (rewards - np.nanmean(rewards, axis=1, keepdims=True)) + rng.normal(0, 0.05, rewards.shape)
    adv = np.where(np.isnan(rewards), rng.normal(0, 0.01, rewards.shape), adv)
    gid = np.repeat(np.arange(num_groups), G)
    perm = rng.permutation(num_groups * G) if shuffle else np.arange(num_groups * G)
    return rewards.reshape(-1)[perm], adv.reshape(-1)[perm], gid[perm]


def segments_for(layout: str, gid: np.ndarray, num_groups: int, G: int) -> Segments:
    if layout == "dense":
        return Segments.blocks(num_groups, G)
    return Segments(torch.from_numpy(gid), num_groups)


# ------------------------------------------------------------------- segments


def test_segment_functions_match_python_loops():
    """segment_sum/max/min equal a loop over groups; groups without rows give 0, -inf and +inf."""
    values = torch.tensor([3.0, -1.0, 2.0, 5.0, -4.0], dtype=torch.float64)
    gid = torch.tensor([2, 0, 2, 0, 2])
    assert segment_sum(values, gid, 4).tolist() == [4.0, 0.0, 1.0, 0.0]
    assert segment_max(values, gid, 4).tolist() == [5.0, -math.inf, 3.0, -math.inf]
    assert segment_min(values, gid, 4).tolist() == [-1.0, math.inf, -4.0, math.inf]


@pytest.mark.parametrize("op", ["sum", "max", "min", "expand"])
def test_dense_and_indexed_segments_agree(op):
    """Contiguous (B, G) blocks reduce to the same numbers as the general group index."""
    B, G = 7, 5
    flat = torch.randn(B * G, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    dense, indexed = Segments.blocks(B, G), Segments(torch.arange(B).repeat_interleave(G), B)
    if op == "expand":
        per_group = torch.arange(B, dtype=torch.float64)
        assert torch.equal(dense.expand(per_group).expand(B, G).reshape(-1), indexed.expand(per_group))
        return
    assert torch.allclose(getattr(dense, op)(dense.rows(flat)), getattr(indexed, op)(indexed.rows(flat)))
    assert torch.equal(dense.gid, indexed.gid)
    assert dense.count().tolist() == indexed.count().tolist() == [float(G)] * B


# ---------------------------------------------------------------- group stats


def test_seed_concrete_group():
    """Seed 002 section 2: r = (1, 0, 1, 0) has mean 0.5, population std 0.5, Bessel std 0.5774."""
    s = group_reward_stats(torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64), Segments.blocks(1, 4))
    assert s.mean.item() == 0.5 and s.std.item() == 0.5
    assert s.std.item() * math.sqrt(4 / 3) == pytest.approx(0.5773502691896257, abs=1e-15)
    assert not s.degenerate.item() and s.n.item() == 4 and s.reward_sum.item() == 2.0


@pytest.mark.parametrize("layout", ["dense", "indexed-shuffled"])
def test_group_reward_stats_match_reference(layout):
    """Counts, sums, means, population stds and the degenerate mask equal a float64 loop, NaN rows left out."""
    shuffle = layout != "dense"
    rewards, _, gid = random_batch(1, shuffle=shuffle)
    seg = segments_for(layout, gid, 40, 6)
    s = group_reward_stats(torch.from_numpy(rewards), seg)
    ref = reference_groups(rewards, gid, 40)
    for key, got in (("rows", s.rows), ("n", s.n), ("sum", s.reward_sum), ("mean", s.mean), ("std", s.std)):
        np.testing.assert_allclose(got.numpy(), ref[key], rtol=1e-12, atol=1e-12, err_msg=key)
    assert s.degenerate.numpy().tolist() == ref["degenerate"].tolist()
    assert s.nonbinary.item() == int(np.sum(~np.isnan(rewards) & (rewards != 0) & (rewards != 1)))


@pytest.mark.parametrize(
    "rewards, degenerate",
    [
        pytest.param([0.7] * 8, True, id="eight-0.7"),
        pytest.param([1.0, float("nan"), 1.0, 1.0], True, id="equal-with-nan"),
        pytest.param([float("nan"), 0.3, float("nan"), float("nan")], True, id="one-scorable"),
        pytest.param([float("nan")] * 4, True, id="all-unscorable"),
        pytest.param([0.7, 0.7, 0.7, math.nextafter(0.7, 1)], False, id="one-ulp-apart"),
        pytest.param([0.0, 1.0, float("nan"), 1.0], False, id="binary-with-nan"),
    ],
)
def test_degenerate_means_exactly_equal_scorable_rewards(rewards, degenerate):
    """A group is degenerate when its scorable rewards are all exactly equal (or fewer than two)."""
    s = group_reward_stats(torch.tensor(rewards, dtype=torch.float64), Segments.blocks(1, len(rewards)))
    assert bool(s.degenerate.item()) is degenerate


def test_infinite_reward_marks_its_group():
    """An infinite reward marks its own group as non-finite and no other."""
    r = torch.tensor([1.0, math.inf, 0.0, 1.0, float("nan"), 0.0], dtype=torch.float64)
    assert group_reward_stats(r, Segments.blocks(3, 2)).nonfinite.tolist() == [True, False, False]


@pytest.mark.parametrize("G", [4, 8, 16])
@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.7, 0.9])
def test_degenerate_rate_matches_seed_table_by_simulation(p, G):
    """Seed 002 section 3: the simulated degenerate rate is p^G + (1-p)^G within 4 standard errors."""
    N = 50_000
    gen = torch.Generator().manual_seed(int(p * 100) * 100 + G)
    rewards = (torch.rand(N, G, generator=gen) < p).double()
    rate = group_reward_stats(rewards.reshape(-1), Segments.blocks(N, G)).degenerate.double().mean().item()
    theory = p**G + (1 - p) ** G
    assert abs(rate - theory) <= 4 * math.sqrt(theory * (1 - theory) / N) + 1e-12


def test_seed_table_values():
    """The seed's theory column is reproduced by exact enumeration: one group per success count K."""
    table = {(0.1, 4): 0.6562, (0.3, 4): 0.2482, (0.5, 4): 0.1250, (0.1, 8): 0.4305, (0.3, 8): 0.0577,
             (0.5, 8): 0.0078, (0.1, 16): 0.1853, (0.3, 16): 0.0033, (0.9, 16): 0.1853}
    for (p, G), printed in table.items():
        groups = (torch.arange(G)[None, :] < torch.arange(G + 1)[:, None]).double()  # row K has K successes
        degenerate = group_reward_stats(groups.reshape(-1), Segments.blocks(G + 1, G)).degenerate.tolist()
        weights = [math.comb(G, k) * p**k * (1 - p) ** (G - k) for k in range(G + 1)]
        assert sum(w for w, d in zip(weights, degenerate, strict=True) if d) == pytest.approx(printed, abs=5e-5)


# ---------------------------------------------------------------- advantages


@pytest.mark.parametrize(
    "name, advantages, slope",
    [
        pytest.param("population", [1.0, -1.0, 1.0, -1.0], 2.0, id="population"),
        pytest.param("bessel", [0.8660254037844386, -0.8660254037844386] * 2, 2.0 * math.sqrt(3 / 4), id="bessel"),
        pytest.param("rloo", [2 / 3, -2 / 3, 2 / 3, -2 / 3], 4 / 3, id="rloo"),
        pytest.param("dr-grpo", [0.5, -0.5, 0.5, -0.5], 1.0, id="dr-grpo"),
    ],
)
def test_seed_concrete_group_advantages(name, advantages, slope):
    """Seed 002 sections 2 and 2.2 on r = (1, 0, 1, 0): the fitted k_g and a zero residual."""
    r = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    seg = Segments.blocks(1, 4)
    s = group_reward_stats(r, seg)
    fit = advantage_fit(torch.tensor(advantages, dtype=torch.float64), s, seg)
    assert fit.slope.item() == pytest.approx(slope, rel=1e-12)
    assert abs(fit.intercept.item()) < 1e-15 and fit.resid_rms.item() < 1e-7
    assert fit.adv_std.item() == pytest.approx(slope * 0.5, rel=1e-12)


def test_rloo_identity_on_seed_group():
    """Seed 002 section 2.2: r_i - mean of the others equals G/(G-1) (r_i - mean) = +-0.6667."""
    r = np.array([1.0, 0.0, 1.0, 0.0])
    G = len(r)
    rloo = np.array([r[i] - (r.sum() - r[i]) / (G - 1) for i in range(G)])
    np.testing.assert_allclose(rloo, G / (G - 1) * (r - r.mean()), atol=1e-15)
    np.testing.assert_allclose(rloo, [2 / 3, -2 / 3, 2 / 3, -2 / 3], atol=1e-15)


@pytest.mark.parametrize("layout", ["dense", "indexed-shuffled"])
def test_advantage_fit_matches_least_squares(layout):
    """Slope, intercept, rms residual, std and the |advantage| maxima equal a per-group lstsq in float64."""
    shuffle = layout != "dense"
    rewards, adv, gid = random_batch(2, shuffle=shuffle)
    seg = segments_for(layout, gid, 40, 6)
    s = group_reward_stats(torch.from_numpy(rewards), seg)
    fit = advantage_fit(torch.from_numpy(adv), s, seg)
    ref = reference_fit(adv, rewards, gid, 40)
    pairs = {"slope": fit.slope, "intercept": fit.intercept, "resid_rms": fit.resid_rms, "adv_std": fit.adv_std,
             "abs_max": fit.abs_max, "unscorable": fit.unscorable_abs_max}
    for key, got in pairs.items():
        np.testing.assert_allclose(got.numpy(), ref[key], rtol=1e-9, atol=1e-9, err_msg=key)
    assert not fit.nonfinite.any()


def test_typical_abs_advantage_is_median_over_live_scorable_rows():
    """The tolerance scale is the median |advantage| over scorable rows of groups with variation."""
    rewards, adv, gid = random_batch(3, shuffle=True)
    s = group_reward_stats(torch.from_numpy(rewards), torch.from_numpy(gid), 40)
    live = ~reference_groups(rewards, gid, 40)["degenerate"]
    rows = live[gid] & ~np.isnan(rewards)
    expected = np.sort(np.abs(adv[rows]))[(rows.sum() - 1) // 2]  # torch's lower median
    assert typical_abs_advantage(torch.from_numpy(adv), s, torch.from_numpy(gid), 40).item() == expected


def test_typical_abs_advantage_defaults_to_one_without_live_groups():
    """With no group carrying variation the relative tolerances fall back to absolute ones."""
    r = torch.full((8,), 0.5, dtype=torch.float64)
    s = group_reward_stats(r, Segments.blocks(2, 4))
    assert typical_abs_advantage(torch.zeros(8, dtype=torch.float64), s, Segments.blocks(2, 4)).item() == 1.0


@pytest.mark.parametrize(
    "bad, where",
    [pytest.param(float("nan"), 1, id="nan-on-scorable-row"), pytest.param(math.inf, 1, id="inf-on-scorable-row"),
     pytest.param(float("nan"), 2, id="nan-on-unscorable-row")],
)
def test_nonfinite_advantages_mark_their_group(bad, where):
    """A NaN or infinite advantage, on any row, marks its group (and only it) non-finite."""
    r = torch.tensor([1.0, 0.0, float("nan"), 1.0, 0.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    a = torch.tensor([1.0, -1.0, 0.0, 1.0, -1.0, 1.0, -1.0, 1.0], dtype=torch.float64)
    a[where] = bad
    seg = Segments.blocks(2, 4)
    fit = advantage_fit(a, group_reward_stats(r, seg), seg)
    assert fit.nonfinite.tolist() == [True, False]


@pytest.mark.parametrize("seed", [0, 1, 2], ids=["seed0", "seed1", "seed2"])
def test_degenerate_blocks_is_group_reward_stats_degenerate(seed):
    """The four-operation degenerate mask of contiguous groups equals group_reward_stats' on NaN, constant, inf,
    one-row-scored and varied groups."""
    gen = torch.Generator().manual_seed(seed)
    r = torch.randint(0, 3, (40, 6), generator=gen).double() / 2
    r[torch.rand(40, 6, generator=gen) < 0.3] = float("nan")
    r[:3] = torch.tensor([[0.7] * 6, [float("nan")] * 6, [float("inf")] * 5 + [1.0]], dtype=torch.float64)
    r[3, 1:] = float("nan")
    gid = torch.arange(40).repeat_interleave(6)
    expected = group_reward_stats(r.reshape(-1), gid, 40).degenerate.double()
    assert torch.equal(degenerate_blocks(r), expected)
