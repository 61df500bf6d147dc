"""fit and candidates: recover the estimator and its stabilizer from advantages, and tell conventions apart."""

from __future__ import annotations

import numpy as np
import pytest

from estimator_batches import draw
from grpo_monitor.estimators import ESTIMATORS, candidates, fit, fit_all

ESTS = list(ESTIMATORS.values())
CLOSED = [e for e in ESTS if e.fit_param and e.eps_power]


def replay_batch(est, seed: int = 0):
    return draw("continuous", groups=6, size=5, seed=seed, shuffle=True, nan_rows=1,
                columns=2 if est.multi_reward else 0, nonnegative=est.reward_domain == "nonnegative")


@pytest.mark.parametrize("est", CLOSED, ids=[e.name for e in CLOSED])
@pytest.mark.parametrize("eps", [0.0, 1e-6, 2e-3, 0.2])
def test_fit_recovers_the_stabilizer(est, eps):
    """On the reference's own output the closed-form fit returns the stabilizer used and a residual ~ 0."""
    b = replay_batch(est)
    adv = est(b.rewards, b.gid, lengths=b.lengths, **{est.fit_param: eps})
    f = fit(est, b.rewards, b.gid, adv, lengths=b.lengths)
    assert f.error is None and f.identified
    assert f.params[est.fit_param] == pytest.approx(eps, rel=1e-7, abs=1e-12)
    assert f.residual < 1e-10
    assert est.name in candidates(b.rewards, b.gid, adv, tol=1e-8, lengths=b.lengths)


@pytest.mark.parametrize("est", [e for e in ESTS if not e.eps_power], ids=[e.name for e in ESTS if not e.eps_power])
def test_fit_without_a_closed_form(est):
    """Estimators with nothing free, or a clamp-style stabilizer, replay their own output exactly."""
    b = replay_batch(est, seed=1)
    adv = est(b.rewards, b.gid, lengths=b.lengths)
    f = fit(est, b.rewards, b.gid, adv, lengths=b.lengths)
    assert f.residual < 1e-10 and f.error is None
    assert set(f.params) <= {est.fit_param}


def _binary_batch():
    """G=4 groups with 1, 2 and 3 successes (stds 0.433, 0.5, 0.433) and one all-fail group."""
    rows = [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0], [0, 1, 0, 0], [0, 1, 1, 0]]
    return np.array(rows, dtype=float).reshape(-1), np.repeat(np.arange(6), 4)


@pytest.mark.parametrize("truth,rejected", [
    ("population", ["bessel", "leave_one_out", "none"]),
    ("bessel", ["population", "leave_one_out", "none"]),
    ("leave_one_out", ["population", "bessel", "none"]),
    ("none", ["population", "bessel", "leave_one_out"]),
])
@pytest.mark.parametrize("eps", [0.0, 1e-4])
def test_candidates_tell_conventions_apart(truth, rejected, eps):
    """Binary G=4 groups of different std separate population, Bessel, leave-one-out and plain centring."""
    r, g = _binary_batch()
    est = ESTIMATORS[truth]
    adv = est(r, g, **({"eps": eps} if est.fit_param else {}))
    found = candidates(r, g, adv, tol=1e-6)
    assert truth in found
    assert not set(rejected) & set(found), f"{truth} data also fit {set(rejected) & set(found)}"


def test_defaults_separate_frameworks_of_one_family():
    """free=False keeps each framework's own eps: TRL's 1e-4 is told from verl's 1e-6 (both Bessel)."""
    r, g = _binary_batch()
    adv = ESTIMATORS["trl.group"](r, g)
    fixed = candidates(r, g, adv, tol=1e-6, free=False)
    assert "trl.group" in fixed and "verl.grpo" not in fixed and "openrlhf.group_norm" not in fixed
    assert "verl.grpo" in candidates(r, g, adv, tol=1e-6)  # with eps free the family fits


def test_group_residuals_point_at_the_broken_group():
    """A sign flip in one group shows up in that group's residual only."""
    r, g = _binary_batch()
    adv = ESTIMATORS["bessel"](r, g)
    adv[g == 4] *= -1
    f = fit("bessel", r, g, adv)
    assert f.residual > 0.5 and int(np.argmax(f.group_residuals)) == 4
    assert np.count_nonzero(f.group_residuals > 1e-9) == 1


def test_passk_typical_scale_and_refusal():
    """pass@k zeroes most rows (typical falls back to the mean |a|); a one-row group makes its reference refuse."""
    r, g = _binary_batch()
    adv = ESTIMATORS["verl.grpo_passk"](r, g)
    f = fit("verl.grpo_passk", r, g, adv)
    assert f.typical == pytest.approx(np.abs(adv[g != 3]).mean()) and f.residual < 1e-12
    lone = fit("verl.grpo_passk", np.append(r, 1.0), np.append(g, 9), np.append(adv, 0.0))
    assert lone.residual == np.inf and "at least 2" in lone.error and not lone.fits(1.0)


def test_multi_reward_replay():
    """(N, K) rewards go to the multi-reward estimators, and as column sums to the others."""
    b = draw("continuous", groups=5, size=4, seed=3, columns=2)
    adv = ESTIMATORS["trl.normalize_then_sum"](b.rewards, b.gid, eps=1e-3)
    fits = {f.name: f for f in fit_all(b.rewards, b.gid, adv)}
    assert fits["trl.normalize_then_sum"].params["eps"] == pytest.approx(1e-3, rel=1e-7)
    assert "trl.group" in fits and fits["trl.group"].residual > 1e-2
    summed = ESTIMATORS["trl.group"](b.rewards.sum(axis=1), b.gid)
    assert candidates(b.rewards, b.gid, summed, tol=1e-8)[0] in {"trl.group", "bessel"}


@pytest.mark.parametrize("bad,match", [
    (np.zeros(5), "advantages has shape"),
    (np.array([np.nan] + [0.0] * 23), "non-finite"),
])
def test_fit_argument_errors(bad, match):
    """Misaligned or non-finite advantages are refused with a worded error."""
    r, g = _binary_batch()
    with pytest.raises(ValueError, match=match):
        fit("bessel", r, g, bad)


def test_plausible_stabilizer_filter():
    """A free eps lets the batch-std estimator mimic plain centring (eps = 1 - std); max_eps_ratio rules that out."""
    r, g = _binary_batch()
    adv = ESTIMATORS["none"](r, g)
    assert "batch" in candidates(r, g, adv, tol=1e-8)
    kept = candidates(r, g, adv, tol=1e-8, max_eps_ratio=0.05)
    assert "batch" not in kept and "none" in kept


def test_fixed_parameters_reach_the_reference():
    """AReaL's example config scales rewards (x10 after -0.5): replaying needs it, passed as fixed."""
    b = draw("binary", groups=6, size=4, seed=8)
    cfg = {"reward_scaling": 10.0, "reward_bias": -0.5}
    adv = ESTIMATORS["areal.grpo"](b.rewards, b.gid, lengths=b.lengths, **cfg)
    assert fit("areal.grpo", b.rewards, b.gid, adv, lengths=b.lengths, fixed=cfg, free=False).residual < 1e-12
    assert fit("areal.grpo", b.rewards, b.gid, adv, lengths=b.lengths, free=False).residual > 1e-6
    assert "areal.grpo" in candidates(b.rewards, b.gid, adv, tol=1e-9, lengths=b.lengths, fixed=cfg)
