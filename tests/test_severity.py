"""Severity: float32 residue that the estimator's own arithmetic explains warns; a constant group that
acts like a real one, or residue nothing explains, stops the run."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig
from grpo_monitor.step.checks import residue_bound
from references import advantages


def _batch(constant: float, G: int, B: int = 16, scale: float = 90.0, offset: float = 10.0, seed: int = 0):
    """Rewards on a 10-100 scale in float32, one prompt (row 3) always scoring ``constant``."""
    gen = torch.Generator().manual_seed(seed)
    r = (offset + scale * torch.rand(B, G, generator=gen)).float()
    r[3] = constant
    return r


def _trl_group(r: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """TRL 1.16 ``scale_rewards="group"`` in float32 (trl/trainer/grpo_trainer.py, _generate_and_score_completions):
    mean and torch.std (Bessel) per group, repeat_interleave, (r - mean) / (std + 1e-4)."""
    G = r.shape[1]
    flat = r.reshape(-1)
    mean = flat.view(-1, G).mean(dim=1).repeat_interleave(G, dim=0)
    std = flat.view(-1, G).std(dim=1).repeat_interleave(G, dim=0)
    return ((flat - mean) / (std + eps)).view(-1, G)


def _monitor(**config) -> GRPOMonitor:
    config.setdefault("std_convention", "bessel")
    config.setdefault("stabilizer", 1e-4)
    return GRPOMonitor(MonitorConfig(**config))


@pytest.mark.parametrize("G", [8, 16])
@pytest.mark.parametrize("constant", [12.3, 87.3])
def test_stock_trl_with_a_constant_prompt_warns_and_goes_on(constant, G):
    """Stock TRL (Bessel + 1e-4, float32), a prompt always scoring 12.3 or 87.3: at most a warning, never a stop."""
    r = _batch(constant, G)
    a = _trl_group(r)
    residue = float(a[3].abs().max())
    mon = _monitor(group_size=G)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        mon.observe_rollout(r, advantages=a)
        report = mon.end_step()
    assert not report.failed and not mon.closed
    errors = [v for v in report.violations if v.severity == "error"]
    assert errors == []
    if residue > 0.01 * float(a[torch.arange(16) != 3].abs().median()):
        (v,) = report.violations
        assert v.invariant == "degenerate_zero" and v.severity == "warning" and "float32 residue" in v.hint


@pytest.mark.parametrize("G", [8, 16])
def test_no_constant_in_8_to_100_stops_stock_trl(G):
    """Every constant in [8, 100) in steps of 0.37 under stock TRL: zero errors, and some residue warnings
    (so the check is not simply blind: TRL's float32 mean is one ulp off for a good share of them)."""
    warned = 0
    for constant in np.arange(8.0, 100.0, 0.37):
        r = _batch(float(np.float32(constant)), G, seed=int(constant * 10))
        mon = _monitor(group_size=G, on_violation="ignore")
        mon.observe_rollout(r, advantages=_trl_group(r))
        found = mon.end_step().violations
        assert all(v.severity == "warning" for v in found), (constant, [v.message() for v in found])
        warned += bool(found)
    assert warned >= 10


def test_verl_default_residue_is_a_warning_with_its_cause(caplog):
    """verl's Bessel + 1e-6 on eight 0.7s gives 0.06 (8% of a real group): logged and counted as a
    warning with its magnitude and cause, the run goes on under on_violation="raise"."""
    r = (torch.rand(16, 8, generator=torch.Generator().manual_seed(1)) < 0.5).float()
    r[3] = 0.7
    a = advantages(r, "bessel", 1e-6)  # verl's torch.std + 1e-6
    mon = GRPOMonitor(MonitorConfig(group_size=8, std_convention="bessel", stabilizer=1e-6))
    with caplog.at_level(logging.WARNING, logger="grpo_monitor"), pytest.warns(RuntimeWarning, match="float32 residue"):
        mon.observe_rollout(r, advantages=a)
        report = mon.end_step()
    (v,) = report.violations
    assert v.severity == "warning" and not report.failed
    assert "group 0.0596 (0.0823 x typical" in v.observed and "stabilizer 1e-06" in v.hint
    assert report.metrics["grpo/invariants/degenerate_zero"] == 1
    assert any("degenerate_zero' warning" in rec.getMessage() for rec in caplog.records)


def test_a_constant_group_that_acts_like_a_real_one_is_an_error(tmp_path):
    """eps 1e-9 (OpenRLHF-style) on eight 0.7s: +-59.6, 80x the typical |advantage|: the run stops."""
    r = (torch.rand(16, 8, generator=torch.Generator().manual_seed(0)) < torch.rand(16, 1,
         generator=torch.Generator().manual_seed(1))).float()
    r[3] = 0.7
    a = advantages(r, "bessel", 1e-9)
    mon = GRPOMonitor(MonitorConfig(group_size=8, repro_dir=str(tmp_path)))
    with pytest.raises(InvariantViolation, match="degenerate_zero' broken") as info:
        mon.observe_rollout(r, advantages=a)
    assert info.value.violations[0].severity == "error"


def test_residue_nothing_explains_is_an_error(tmp_path):
    """A constant group of 1.0s given 0.1 x typical (an epsilon used as a floor): float32 rounding with
    stabilizer 1e-4 explains at most 0.038, so it stays an error."""
    r = (torch.rand(16, 8, generator=torch.Generator().manual_seed(2)) < 0.5).double()
    r[3] = 1.0
    a = advantages(r, "population", 1e-4)
    a[3] = 0.1 * a[torch.arange(16) != 3].abs().median()
    mon = GRPOMonitor(MonitorConfig(group_size=8, std_convention="population", stabilizer=1e-4,
                                    repro_dir=str(tmp_path), policies={"zero_group_mean": "ignore"}))
    assert float(residue_bound(torch.tensor([1.0]), torch.tensor([8.0]), 1e-4)[0]) < 0.04
    with pytest.raises(InvariantViolation, match="degenerate_zero"):
        mon.observe_rollout(r, advantages=a)


def test_the_residue_bound_against_float32_arithmetic():
    """The bound covers what a float32 mean of G equal values really does, for 2,000 values in [1e-3, 1e4)."""
    values = np.exp(np.random.default_rng(0).uniform(np.log(1e-3), np.log(1e4), 2000)).astype(np.float32)
    for G in (4, 8, 16, 64):
        t = torch.tensor(values).repeat_interleave(G).view(-1, G)
        err = (t - t.mean(1, keepdim=True)).abs().amax(1).double()
        bound = residue_bound(torch.tensor(values, dtype=torch.float64), torch.full((2000,), float(G)), 1.0)
        assert bool((err <= bound).all()), G
