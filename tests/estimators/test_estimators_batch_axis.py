"""Under "auto", advantages normalised over the whole batch of a grouped rollout are said once, not locked silently."""

from __future__ import annotations

import warnings

import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.estimators import ESTIMATORS
from grpo_monitor.estimators.judge import ignores_groups
from references import advantages


def _rewards(seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(16, 8, generator=gen) < torch.rand(16, 1, generator=gen)).double()


def _batch_norm(r: torch.Tensor) -> torch.Tensor:
    """The wrong axis, computed independently: (r - batch mean) / (batch std, Bessel, + 1e-6)."""
    return (r - r.mean()) / (r.std() + 1e-6)


def _batch_mean(r: torch.Tensor) -> torch.Tensor:
    return r - r.mean()


def _run(config: dict, make, steps: int = 3):
    """Reports and the RuntimeWarnings naming the group-blind estimator of ``steps`` steps."""
    mon = GRPOMonitor(MonitorConfig(group_size=8, on_violation="raise", **config))
    reports = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for step in range(steps):
            r = _rewards(step)
            mon.observe_rollout(r, advantages=make(r))
            reports.append(mon.end_step())
    return reports, [str(w.message) for w in seen if "ignores the groups" in str(w.message)]


def test_the_group_blind_entries_are_measured_not_listed():
    """Regrouping a probe batch changes nothing for exactly the four batch-baseline entries."""
    assert sorted(n for n in ESTIMATORS if ignores_groups(n)) == [
        "roll.batch_mean", "roll.batch_norm", "skyrl.reinforce_plus_plus", "verl.reinforce_plus_plus"]


@pytest.mark.parametrize("make", [_batch_norm, _batch_mean], ids=["batch-norm", "batch-mean"])
def test_auto_says_once_that_the_identified_estimator_ignores_the_groups(make):
    """One warning in three steps, naming the group-blind entry and the declaration that silences it; no breach."""
    reports, said = _run({}, make)
    assert all(r.convention in ("roll.batch_norm", "roll.batch_mean") and r.violations == [] for r in reports)
    assert len(said) == 1
    name = reports[0].convention
    assert name in said[0] and f"std_convention={name!r}" in said[0] and "wrong normalisation axis" in said[0]


def test_declared_batch_estimator_is_quiet():
    """The user (or an integration) declared the batch estimator: it is intended, nothing is said."""
    reports, said = _run({"std_convention": "roll.batch_norm"}, _batch_norm)
    assert said == [] and all(r.violations == [] for r in reports)


@pytest.mark.parametrize("convention", ["population", "bessel", "batch"])
def test_group_estimators_under_auto_are_quiet(convention):
    """Group baselines (a batch scale included, trl.batch's shape) identified under auto: nothing said."""
    reports, said = _run({}, lambda r: advantages(r, convention, 1e-4))
    assert said == [] and all(r.violations == [] for r in reports)
