"""Known defect shapes in the registry: the real defect fits and is an error naming it; shipped estimators never do."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig
from grpo_monitor.estimators import ESTIMATORS
from grpo_monitor.estimators.defects import DEFECTS

G = 8


def verl_3635(r: torch.Tensor) -> torch.Tensor:
    """The defect as it ran, written independently: float32, one-pass Bessel variance, clamp(var, 1e-6) as floor."""
    r = r.float()
    s1, s2 = r.sum(1, keepdim=True), (r * r).sum(1, keepdim=True)
    var = (s2 - s1 * s1 / G) / (G - 1)
    return (r - s1 / G) / torch.sqrt(torch.clamp(var, min=1e-6))


def _rewards(seed: int, low_variance: int = 4) -> torch.Tensor:
    """Binary groups, plus ``low_variance`` groups whose reward std is below 1e-3 (where the floor binds)."""
    gen = torch.Generator().manual_seed(seed)
    r = (torch.rand(16, G, generator=gen) < torch.rand(16, 1, generator=gen)).double()
    r[:low_variance] = 0.5 + 3e-4 * torch.rand(low_variance, G, generator=gen, dtype=torch.float64)
    return r


def test_each_defect_names_its_source_and_fix():
    """A defect record carries its file, its issue and the change that fixed it."""
    d = DEFECTS["defect.verl.variance_floor"]
    assert "groupwise.py::group_mean_std" in d.shape.source and "#3635" in d.shape.source
    assert "#6348" in d.fixed_by and set(DEFECTS).isdisjoint(ESTIMATORS)


def test_verl_3635_under_auto_is_an_error_naming_the_defect(tmp_path):
    """Finite and monotone, so the universal invariants hold: the defect record makes it an error, not a warning."""
    mon = GRPOMonitor(MonitorConfig(group_size=G, repro_dir=str(tmp_path)))
    r = _rewards(0)
    with pytest.raises(InvariantViolation) as err:
        mon.observe_rollout(r, advantages=verl_3635(r))
    (v,) = err.value.violations
    assert v.invariant == "convention" and v.severity == "error"
    assert "defect.verl.variance_floor" in v.observed and "#3635" in v.observed and "#6348" in v.observed
    assert "defect.verl.variance_floor" in v.hint


SHIPPED = [n for n, e in ESTIMATORS.items() if not e.multi_reward]


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("low_variance", [0, 4], ids=["plain", "low-variance-groups"])
def test_no_shipped_estimator_is_called_a_defect(name, low_variance):
    """Every shipped single-reward estimator (float64 reference cast to float32), under auto: no defect named."""
    est = ESTIMATORS[name]
    r = _rewards(1, low_variance)
    gid = np.repeat(np.arange(16), G)
    lengths = np.random.default_rng(2).integers(1, 30, 16 * G).astype(float)
    adv = est(r.reshape(-1).numpy(), gid, lengths=lengths)
    mon = GRPOMonitor(MonitorConfig(group_size=G, on_violation="warn"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mon.observe_rollout(r, advantages=torch.from_numpy(adv).float().reshape(16, G),
                            lengths=torch.from_numpy(lengths).reshape(16, G))
        report = mon.end_step()
    assert not [v for v in report.violations if "known defect" in v.observed], name
