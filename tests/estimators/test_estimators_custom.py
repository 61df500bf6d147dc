"""Your own estimator as the reference: declared as a function, replayed in float64, it keeps its own numbers
quiet and stops misaligned rows, a wrong group slice and a swapped branch; it survives a resume by name."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig
from grpo_monitor.estimators import CUSTOM, custom, get

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integrations" / "framework_cases"))
import my_estimator as mine  # noqa: E402

G, B = 4, 16


def _batch(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.rand(B * G, generator=gen, dtype=torch.float64)
    scores[:G] = 0.7  # a constant group
    perm = torch.randperm(B * G, generator=gen)
    uid = np.array([f"q{i // G}" for i in range(B * G)], dtype=object)[perm.numpy()]
    return scores[perm], uid


def _observe(mon, variant: str, seed: int = 0):
    scores, uid = _batch(seed)
    adv = mine.rows(scores, uid, variant, G).float()
    mon.observe_rollout(scores, group_ids=list(uid), advantages=adv)
    return mon.end_step()


def test_your_own_numbers_are_quiet_and_named(tmp_path):
    """Declared as a function: quiet, named by its default name, logged with the custom id -2."""
    mon = GRPOMonitor(MonitorConfig(std_convention=mine.reference, repro_dir=str(tmp_path)))
    for seed in range(2):
        report = _observe(mon, "healthy", seed)
        assert report.violations == [] and report.convention == "custom.my_estimator.reference"
        assert report.metrics["grpo/adv/convention_id"] == -2


@pytest.mark.parametrize("variant", ["misaligned", "wrong_slice", "swapped_branch"])
def test_a_bug_of_your_own_estimator_is_an_error(variant, tmp_path):
    """The replay of your function on the observed rewards does not reproduce the buggy advantages."""
    mon = GRPOMonitor(MonitorConfig(std_convention=mine.reference, repro_dir=str(tmp_path)))
    with pytest.raises(InvariantViolation) as info:
        _observe(mon, variant)
    assert {v.invariant for v in info.value.violations} & {"convention", "affine_in_rewards", "zero_group_mean"}
    assert all(v.severity == "error" for v in info.value.violations)


def test_under_auto_your_estimator_is_an_unknown_one():
    """Not declared, the same numbers get an unknown_estimator warning (the universal invariants hold)."""
    mon = GRPOMonitor(MonitorConfig(on_violation="warn"))
    with pytest.warns(RuntimeWarning, match="unknown_estimator"):
        report = _observe(mon, "healthy")
    assert [(v.invariant, v.severity) for v in report.violations] == [("unknown_estimator", "warning")]


def test_promises_default_to_what_the_outputs_show_and_can_be_overridden():
    """tanh of z-scores keeps constant groups at 0 but is not affine in the rewards: the probes say so.
    Overridden promises are taken as given; unknown ones, a registry name or a non-function are worded errors."""
    est = custom(mine.reference, name="test.tanh")
    assert "degenerate_zero" in est.promises and "affine_in_rewards" not in est.promises
    assert custom(mine.reference, name="test.tanh2", promises=["degenerate_zero"]).promises == {"degenerate_zero"}
    with pytest.raises(ValueError, match="promises"):
        custom(mine.reference, name="test.bad", promises=["monotone"])
    with pytest.raises(ValueError, match="registry name"):
        custom(mine.reference, name="trl.group")
    with pytest.raises(TypeError, match="rewards"):
        custom("not a function", name="x")  # type: ignore[arg-type]


def test_a_free_stabilizer_is_fitted(tmp_path):
    """A function with an ``eps`` keyword: the replay fits it, so advantages made with another eps are quiet."""
    def zscore(r, eps=1e-6):
        return (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + eps)

    mon = GRPOMonitor(MonitorConfig(std_convention=custom(zscore, name="test.z"), repro_dir=str(tmp_path)))
    scores, uid = _batch()
    r2d = scores.reshape(B, G)
    mon.observe_rollout(r2d, advantages=zscore(r2d, eps=1e-2))
    assert mon.end_step().violations == []


def test_state_dict_resumes_by_name(tmp_path):
    """state_dict holds plain values (json); a new monitor declared by the same name resumes the run."""
    mon = GRPOMonitor(MonitorConfig(std_convention=custom(mine.reference, name="team.tanh"),
                                    repro_dir=str(tmp_path)))
    _observe(mon, "healthy")
    state = json.loads(json.dumps(mon.state_dict()))
    resumed = GRPOMonitor(MonitorConfig(std_convention="team.tanh", repro_dir=str(tmp_path)))
    resumed.load_state_dict(state)
    assert resumed.step == mon.step and _observe(resumed, "healthy", 1).violations == []
    assert get("team.tanh") is CUSTOM["team.tanh"]
    with pytest.raises(ValueError, match="custom"):
        MonitorConfig(std_convention="team.never_declared")


def test_an_entry_fitting_only_with_a_huge_stabilizer_is_named_so():
    """(r - mean) / (std + 5) on binary rewards is the population formula with eps 5, ten times the reward std: no
    trainer's stabilizer, so it is not taken for that entry, and the warning says why instead of calling a
    numerically exact fit "off"."""
    g = torch.Generator().manual_seed(0)
    r = (torch.rand(16, 8, generator=g) < 0.5).double()
    std = r.std(1, keepdim=True, unbiased=False)
    monitor = GRPOMonitor(MonitorConfig(group_size=8, std_convention="auto"), sinks=[])
    monitor.observe_rollout(r.float(), advantages=((r - r.mean(1, keepdim=True)) / (std + 5.0)).float())
    report = monitor.end_step()
    (v,) = report.violations
    assert v.invariant == "unknown_estimator" and v.severity == "warning"
    ratio = 5.0 / float(std[std > 0].mean())
    assert f"population (fits only with eps=5, {ratio:.3g} x the reward std" in v.observed
