"""Invariant 7: the std convention is inferred, reported, held across steps, and checked when declared."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from grpo_monitor import InvariantViolation, MonitorConfig
from grpo_monitor.estimators.classic import ConventionTracker, fitting_conventions
from grpo_monitor.stats.conventions import CONVENTIONS
from references import advantages

# ---------------------------------------------------------------------- batches (float32, as trainers use)


def binary_rewards(seed: int, B: int = 64, G: int = 4) -> torch.Tensor:
    """Binary rewards whose per-group success rates spread over (0, 1), so group stds differ."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(B, G, generator=gen) < torch.rand(B, 1, generator=gen)).float()


def run_step(mon, r, a, step=None):
    mon.observe_rollout(r, advantages=a)
    return mon.end_step(step)


CASES = [
    pytest.param("population", 0.0, id="population-eps0"),
    pytest.param("population", 1e-4, id="population-trl-eps1e-4"),
    pytest.param("bessel", 1e-4, id="bessel-trl-eps1e-4"),
    pytest.param("bessel", 1e-6, id="bessel-verl-eps1e-6"),
    pytest.param("none", 0.0, id="none-dr-grpo"),
    pytest.param("leave_one_out", 0.0, id="leave-one-out-rloo"),
    pytest.param("batch", 1e-4, id="batch-trl-scale-rewards-batch"),
]

# ------------------------------------------------------------------ inference


@pytest.mark.parametrize("G", [4, 8])
@pytest.mark.parametrize("convention, eps", CASES)
def test_auto_infers_and_reports_the_convention(make_monitor, convention, eps, G):
    """Under "auto" the monitor names the convention, its id, scale and stabilizer, and flags nothing."""
    mon = make_monitor()
    r = binary_rewards(G, G=G)
    report = run_step(mon, r, advantages(r, convention, eps))
    m = report.metrics
    assert report.violations == []
    assert report.convention == convention
    assert m["grpo/adv/convention_id"] == CONVENTIONS.index(convention)
    if convention in ("population", "bessel"):
        assert m["grpo/adv/stabilizer"] == pytest.approx(eps, abs=2e-6)
        factor = 1.0 if convention == "population" else math.sqrt((G - 1) / G)
        # live std of z-scores: 1 (population) or sqrt((G-1)/G) (Bessel), shrunk by the stabilizer
        assert m["grpo/adv/live_std_mean"] == pytest.approx(factor, rel=5e-4)
        assert m["grpo/adv/convention_scale"] == pytest.approx(factor, rel=5e-4)
    if convention in ("none", "leave_one_out"):
        assert m["grpo/adv/stabilizer"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("G", [2, 4, 8, 16])
def test_live_std_mean_population_and_bessel(make_monitor, G):
    """grpo/adv/live_std_mean is 1.0 for population z-scores and sqrt((G-1)/G) for Bessel (0.866 at G=4)."""
    r = binary_rewards(10 + G, G=G)
    for convention, expected in (("population", 1.0), ("bessel", math.sqrt((G - 1) / G))):
        m = run_step(make_monitor(), r.double(), advantages(r.double(), convention)).metrics
        assert m["grpo/adv/live_std_mean"] == pytest.approx(expected, rel=1e-6)
    assert math.sqrt(3 / 4) == pytest.approx(0.8660, abs=1e-4)


def test_small_reward_scale_is_not_mistaken_for_no_convention(make_monitor):
    """TRL's eps 1e-4 dominating tiny reward stds is still population with stabilizer 1e-4."""
    r = binary_rewards(3, G=4) * 1e-3
    report = run_step(make_monitor(), r, advantages(r, "population", 1e-4))
    assert report.violations == [] and report.convention == "population"
    assert report.metrics["grpo/adv/stabilizer"] == pytest.approx(1e-4, rel=1e-3)


def test_equal_stds_are_resolved_by_the_stabilizer_sign():
    """With one std in every live group, population (e >= 0, small) is told apart from Bessel (e < 0)."""
    G, std = 4, 0.5
    values = {"live": 10.0, "inv_k_sum": 10 * (std + 1e-4), "live_std_sum": 10 * std, "adv_rows": 40.0}
    for name in CONVENTIONS:
        e = {"population": 1e-4, "bessel": std + 1e-4 - std * math.sqrt(G / (G - 1)), "none": std + 1e-4 - 1,
             "leave_one_out": std + 1e-4 - 0.75, "batch": std + 1e-4}[name]
        values[f"e_{name}_min"] = values[f"e_{name}_max"] = e
    fits, stabs = fitting_conventions(values, MonitorConfig())
    assert fits == ("population", "batch") and stabs["population"] == pytest.approx(1e-4)


# ------------------------------------------------------------------- declared


@pytest.mark.parametrize("declared, actual", [("population", "bessel"), ("bessel", "population")])
def test_declared_convention_must_match(make_monitor, declared, actual):
    """Population and Bessel differ by sqrt(G/(G-1)) = 1.155 at G=4 (13.4%): a mismatch is a breach."""
    mon = make_monitor(std_convention=declared, group_size=4)
    r = binary_rewards(5)
    with pytest.raises(InvariantViolation) as info:
        run_step(mon, r, advantages(r, actual, 1e-4))
    (v,) = info.value.violations
    assert v.invariant == "convention"
    assert f"declared std_convention={declared!r}" in v.observed and actual in v.observed
    assert math.sqrt(4 / 3) - 1 == pytest.approx(0.1547, abs=1e-4) and 1 - math.sqrt(3 / 4) == pytest.approx(0.134,
                                                                                                             abs=1e-3)


@pytest.mark.parametrize("convention, eps", CASES)
def test_declared_convention_that_matches_passes(make_monitor, convention, eps):
    """Each convention declared and used passes, and the report names it."""
    mon = make_monitor(std_convention=convention)
    r = binary_rewards(6)
    report = run_step(mon, r, advantages(r, convention, eps))
    assert report.violations == [] and report.convention == convention


def test_declared_stabilizer_must_match(make_monitor):
    """A declared stabilizer pins the epsilon: 1e-4 passes, 1e-2 in the data does not."""
    r = binary_rewards(7)
    ok = run_step(make_monitor(std_convention="population", stabilizer=1e-4), r, advantages(r, "population", 1e-4))
    assert ok.violations == []
    with pytest.raises(InvariantViolation, match="convention"):
        run_step(make_monitor(std_convention="population", stabilizer=1e-4), r, advantages(r, "population", 1e-2))


# -------------------------------------------------------------------- steps


def test_auto_flags_a_change_between_steps(make_monitor, recording_sink):
    """Population at step 0 then Bessel at step 1 breaks the one-convention invariant at step 1."""
    mon = make_monitor(sinks=[recording_sink], on_violation="warn")
    r = binary_rewards(8)
    assert run_step(mon, r, advantages(r, "population", 1e-4)).violations == []
    with pytest.warns(RuntimeWarning, match="convention changed between steps"):
        report = run_step(mon, r, advantages(r, "bessel", 1e-4))
    (v,) = report.violations
    assert v.invariant == "convention" and v.step == 1 and "was population" in v.observed
    assert report.convention == "bessel"


def test_auto_warns_when_no_convention_fits_but_the_universal_invariants_hold(make_monitor):
    """A random positive scale per group (affine, zero-mean, but no common rule) fits no convention: under
    "auto" an unknown_estimator warning naming how to declare it (the run goes on); declared, an error."""
    r = binary_rewards(9)
    k = torch.rand(64, 1, generator=torch.Generator().manual_seed(1)) + 0.5
    with pytest.warns(RuntimeWarning, match="unknown_estimator"):
        report = run_step(make_monitor(), r, k * advantages(r, "none"))
    assert [(v.invariant, v.severity) for v in report.violations] == [("unknown_estimator", "warning")]
    assert "custom(fn" in report.violations[0].observed and report.convention is None
    assert report.metrics["grpo/adv/convention_id"] == -1
    with pytest.raises(InvariantViolation) as info:
        run_step(make_monitor(std_convention="population"), r, k * advantages(r, "none"))
    assert [v.invariant for v in info.value.violations] == ["convention"]


def test_ambiguous_first_step_then_disambiguated(make_monitor):
    """G=2 (every live std 0.5) fits several conventions; a later G=4 batch narrows them without a breach."""
    mon = make_monitor()
    r2 = binary_rewards(11, G=2)
    first = run_step(mon, r2, advantages(r2, "population", 1e-4))
    assert first.violations == [] and first.convention == "population"
    r4 = binary_rewards(12, G=4)
    second = run_step(mon, r4, advantages(r4, "population", 1e-4))
    assert second.violations == [] and second.convention == "population"


def test_locked_convention_survives_state_dict(make_monitor):
    """The convention locked before a checkpoint is enforced after load_state_dict."""
    r = binary_rewards(13)
    first = make_monitor(on_violation="ignore")
    run_step(first, r, advantages(r, "population", 1e-4))
    resumed = make_monitor(on_violation="ignore")
    resumed.load_state_dict(first.state_dict())
    report = run_step(resumed, r, advantages(r, "bessel", 1e-4))
    assert [v.invariant for v in report.violations] == ["convention"] and report.step == 1


def test_tracker_ignores_steps_without_live_groups():
    """A step with no live group says nothing about the convention."""
    tracker = ConventionTracker(MonitorConfig())
    assert tracker.update({"live": 0.0, "adv_rows": 8.0}) is None
    assert tracker.candidates is None


def test_rewards_on_a_large_scale_keep_their_convention(make_monitor):
    """Positive affine reward transforms cancel without a stabilizer: -1/+1 rewards (DAPO) are population too."""
    r = binary_rewards(14) * 2 - 1
    report = run_step(make_monitor(), r.double(), advantages(r.double(), "population"))
    assert report.violations == [] and report.convention == "population"
    assert np.isclose(report.metrics["grpo/adv/live_std_mean"], 1.0)
