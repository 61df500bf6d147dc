"""Row ages from observe_rollout(policy_version=): grpo/offpolicy/* against a float64 count, the boundary, the lag."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig
from grpo_monitor.step.inputs import InputTypeError, InputValueError
from test_mismatch_invariant import sampled

G = 4


def reference(versions: list[np.ndarray], trained: int) -> dict[str, float]:
    age = trained - np.concatenate([v.reshape(-1) for v in versions]).astype(np.float64)
    out = {"grpo/offpolicy/age_mean": age.mean(), "grpo/offpolicy/age_max": age.max()}
    for a, label in ((0, "0"), (1, "1"), (2, "2")):
        out[f"grpo/offpolicy/age_frac_{label}"] = np.mean(age == a)
    out["grpo/offpolicy/age_frac_3plus"] = np.mean(age >= 3)
    return out


def batch(seed: int, groups: int, trained: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards (groups, G) and versions up to 6 behind ``trained`` (an async buffer's spread)."""
    g = torch.Generator().manual_seed(seed)
    rewards = (torch.rand(groups, G, generator=g) < 0.5).double()
    return rewards, trained - torch.randint(0, 7, (groups, G), generator=g)


@pytest.mark.parametrize("calls", [1, 3], ids=["one call", "three calls"])
@pytest.mark.parametrize("trained", [None, 9], ids=["trained=step", "trained_version=9"])
def test_ages_match_a_float64_count_across_calls(calls, trained):
    """Mean, max and the age histogram equal the count over every row of the step's calls."""
    mon = GRPOMonitor(MonitorConfig(group_size=G))
    for _ in range(2):  # step 0, then step 1: the default trained version follows the step
        version_now = mon.step if trained is None else trained
        parts = [batch(10 * mon.step + c, 2 + c, version_now) for c in range(calls)]
        for rewards, versions in parts:
            mon.observe_rollout(rewards, policy_version=versions, trained_version=trained)
        got = mon.end_step().metrics
        for key, value in reference([v.numpy() for _, v in parts], version_now).items():
            assert got[key] == pytest.approx(float(value), rel=1e-12), key


def test_no_versions_no_keys():
    """Without policy_version no grpo/offpolicy/* key appears."""
    mon = GRPOMonitor(MonitorConfig(group_size=G))
    mon.observe_rollout(batch(0, 2, 0)[0])
    assert not any(k.startswith("grpo/offpolicy/") for k in mon.end_step().metrics)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(policy_version=torch.zeros(2, G)), InputTypeError, "policy_version must hold integers"),
    (dict(policy_version=torch.zeros(3, dtype=torch.long)), InputValueError, "policy_version has shape (3,)"),
    (dict(policy_version=torch.zeros(2, G, dtype=torch.long), trained_version=2.0), InputTypeError,
     "trained_version must be an int"),
    (dict(trained_version=3), InputValueError, "trained_version was given without policy_version"),
], ids=["float versions", "misaligned", "float trained", "trained alone"])
def test_bad_arguments_are_named(kwargs, error, message):
    """Each mistake raises the user's error naming the argument, what was expected and what came."""
    mon = GRPOMonitor(MonitorConfig(group_size=G))
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        mon.observe_rollout(batch(0, 2, 0)[0], **kwargs)


def test_ages_declare_the_mismatch_lag():
    """A lagging sampler's mismatch KL: an error with fresh rows, the statistics without the error when the
    rollout's versions show the lag (as max_policy_lag would declare it)."""
    x = sampled()
    rewards = batch(0, 2, 0)[0]
    for lag, raises in ((0, True), (1, False)):
        mon = GRPOMonitor(MonitorConfig(group_size=G, strict=True))
        mon.step = 5
        mon.observe_rollout(rewards, policy_version=torch.full((2, G), 5 - lag))
        mon.observe_loss(**x)
        if raises:
            with pytest.raises(InvariantViolation, match="policy_version"):
                mon.end_step()
        else:
            report = mon.end_step()
            assert report.violations == [] and report.metrics["grpo/mismatch/k3_mean"] > 0.02
            assert report.metrics["grpo/offpolicy/age_max"] == 1.0
