"""GRPOMonitor: the metric keys and values, the breach policies, repro files, and permutation invariance."""

from __future__ import annotations

import math
import os
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import grpo_monitor.step.sync as sync_module
from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig, load_repro, replay
from references import advantages

REQUIRED_KEYS = (
    "grpo/groups/total", "grpo/groups/degenerate_rate", "grpo/groups/effective_prompts", "grpo/reward/mean",
    "grpo/reward/question_std_mean", "grpo/adv/group_mean_abs_max", "grpo/adv/live_std_mean",
    "grpo/adv/degenerate_abs_max", "grpo/adv/convention_id", "grpo/adv/convention_scale", "grpo/adv/stabilizer",
)


def population(r: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """Population z-scores per row of ``r`` (B, G) in float32 (TRL-like stabilizer)."""
    return advantages(r.float(), "population", eps)


def binary(seed: int, B: int = 32, G: int = 8) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(B, G, generator=gen) < torch.rand(B, 1, generator=gen)).float()


def hazard_batch(seed: int = 0, B: int = 16, G: int = 8, eps: float = 1e-9):
    """float32 hazard: group 3 holds eight 0.7s; torch.std (Bessel) + ``eps``. Uid strings as ids.

    With eps 1e-9 (OpenRLHF-style) the constant group gets |advantage| 0.92, more than a real
    group's typical 0.72: an error. verl's 1e-6 gives 0.056: a warning (tests/test_severity.py).
    """
    r = binary(seed, B, G)
    r[3] = 0.7
    a = advantages(r, "bessel", eps)
    uids = np.repeat(np.array([f"uid-{i:03d}" for i in range(B)], dtype=object), G)
    return r.reshape(-1), a.reshape(-1), uids


# ------------------------------------------------------------------ metrics


def test_metric_keys_and_histogram(make_monitor, recording_sink):
    """Every issue-2 key is in the report and reaches the sink; the per-question std histogram too."""
    mon = make_monitor(sinks=[recording_sink])
    r = binary(0)
    report = (mon.observe_rollout(r, advantages=population(r)), mon.end_step())[1]
    assert set(REQUIRED_KEYS) <= set(report.metrics)
    assert report.convention == "population"
    assert len(report.histograms["grpo/reward/question_std"]) == 32
    step, logged = recording_sink.metrics[0]
    assert step == 0 and set(REQUIRED_KEYS) <= set(logged)
    assert recording_sink.histograms[0][1] == "grpo/reward/question_std"


def test_metric_values_match_numpy(make_monitor):
    """The group metrics equal their numpy definitions (float64 reference)."""
    r = binary(1).double().numpy()
    a = population(torch.from_numpy(r)).double().numpy()
    mon = make_monitor()
    mon.observe_rollout(r, advantages=a)
    m = mon.end_step().metrics
    std = r.std(1)
    live = std > 0
    assert m["grpo/groups/total"] == 32
    assert m["grpo/groups/degenerate_rate"] == pytest.approx((~live).mean())
    assert m["grpo/groups/effective_prompts"] == live.sum()
    assert m["grpo/reward/mean"] == pytest.approx(r.mean(), rel=1e-12)
    assert m["grpo/reward/question_std_mean"] == pytest.approx(std.mean(), rel=1e-12)
    assert m["grpo/adv/group_mean_abs_max"] == pytest.approx(np.abs(a[live].mean(1)).max(), abs=1e-12)
    assert m["grpo/adv/live_std_mean"] == pytest.approx(a[live].std(1).mean(), rel=1e-9)
    assert m["grpo/adv/degenerate_abs_max"] == pytest.approx(np.abs(a[~live]).max() if (~live).any() else 0.0)


def test_seed_section_5_live_fraction_and_effective_prompts(make_monitor):
    """Seed 002 section 5 (numpy default_rng(0), 512 prompts, G=4): 399, 450, 384, 182 effective prompts."""
    rng = np.random.default_rng(0)
    mon = make_monitor(group_size=4)
    for p, expected in ((0.3, 399), (0.5, 450), (0.7, 384), (0.9, 182)):
        rewards = (rng.random((512, 4)) < p).astype(float)
        std = rewards.std(axis=1, keepdims=True)
        adv = (rewards - rewards.mean(axis=1, keepdims=True)) / (std + 1e-8)
        mon.observe_rollout(rewards, advantages=adv)
        m = mon.end_step().metrics
        assert m["grpo/groups/effective_prompts"] == expected == int((std > 1e-6).sum())
        assert 1 - m["grpo/groups/degenerate_rate"] == pytest.approx(expected / 512)
        assert m["grpo/adv/live_std_mean"] == pytest.approx(1.0, abs=1e-6)
        assert abs(m["grpo/adv/mean"]) < 1e-12


def test_several_rollouts_in_one_step_are_pooled(make_monitor):
    """Two observe_rollout calls in a step report the statistics of their union."""
    r = binary(2, B=40)
    a = population(r)
    split = make_monitor()
    split.observe_rollout(r[:15], advantages=a[:15])
    split.observe_rollout(r[15:], advantages=a[15:])
    whole = make_monitor()
    whole.observe_rollout(r, advantages=a)
    got, want = split.end_step().metrics, whole.end_step().metrics
    for key in REQUIRED_KEYS:
        assert got[key] == pytest.approx(want[key], rel=1e-12, abs=1e-12), key


# ------------------------------------------------------------------ breaches


def _advance(mon, steps: int) -> None:
    """``steps`` clean steps in the hazard batch's convention (Bessel, eps 1e-6)."""
    r = binary(9)
    for _ in range(steps):
        mon.observe_rollout(r, advantages=advantages(r, "bessel", 1e-6))
        assert mon.end_step().violations == []


@pytest.mark.parametrize("defer_checks", [False, True], ids=["raise-at-rollout", "raise-at-end-step"])
def test_raise_writes_the_step_then_raises(make_monitor, recording_sink, defer_checks):
    """On a breach under "raise": metrics and violation reach every sink, then InvariantViolation is raised."""
    mon = make_monitor(sinks=[recording_sink], defer_checks=defer_checks)
    _advance(mon, 3)
    r, a, uids = hazard_batch()
    if defer_checks:
        mon.observe_rollout(r, advantages=a, group_ids=uids)  # checked at the step end
        with pytest.raises(InvariantViolation) as info:
            mon.end_step()
    else:
        with pytest.raises(InvariantViolation) as info:
            mon.observe_rollout(r, advantages=a, group_ids=uids)
    (v,) = info.value.violations
    assert v.invariant == "degenerate_zero" and v.step == 3 and v.groups == ("uid-003",)
    message = str(info.value)
    for part in ("step 3", "'degenerate_zero'", "observed max |advantage| in an all-equal group 59.6",
                 "expected |advantage| <= 0.01 x typical", "['uid-003']", "Likely cause: float32 rounding",
                 v.repro_path):
        assert part in message
    assert os.path.exists(v.repro_path)
    last = recording_sink.reports[-1]
    assert last.step == 3 and last.failed and [x.invariant for x in last.violations] == ["degenerate_zero"]
    assert 59 < last.metrics["grpo/adv/degenerate_abs_max"] < 60  # the constant group acts like a real one
    assert last.metrics["grpo/invariants/degenerate_zero"] == 1
    assert recording_sink.alerts and "degenerate_zero" in recording_sink.alerts[-1][0]
    assert recording_sink.finished == [True]


def test_repro_file_reproduces_the_breach(make_monitor):
    """load_repro returns the offending tensors; replay finds the same breach on the same group."""
    mon = make_monitor()
    r, a, uids = hazard_batch()
    with pytest.raises(InvariantViolation) as info:
        mon.observe_rollout(r, advantages=a, group_ids=uids)
    path = info.value.violations[0].repro_path
    data = load_repro(path)
    assert data["step"] == 0 and data["invariants"] == ["degenerate_zero"]
    (saved,) = data["rollouts"]
    assert torch.equal(saved["rewards"], r.double()) and torch.equal(saved["advantages"], a.double())
    report = replay(path)
    (v,) = report.violations
    assert v.invariant == "degenerate_zero"
    assert v.groups == info.value.violations[0].groups == ("uid-003",)  # named as the live check named it


def test_warn_warns_once_per_invariant_and_counts(make_monitor, recording_sink):
    """Under "warn" the first breach of an invariant warns, later ones are counted silently."""
    mon = make_monitor(sinks=[recording_sink], on_violation="warn")
    r, a, uids = hazard_batch()
    with pytest.warns(RuntimeWarning, match="degenerate_zero") as record:
        for _ in range(3):
            mon.observe_rollout(r, advantages=a, group_ids=uids)
            report = mon.end_step()
    assert len([w for w in record if "degenerate_zero" in str(w.message)]) == 1
    assert mon.violation_counts == {"degenerate_zero": 3}
    assert [v.invariant for v in report.violations] == ["degenerate_zero"] and not report.failed
    assert recording_sink.finished == []


def test_ignore_only_records(make_monitor):
    """Under "ignore" a breach is in the report and the counts, with no warning and no exception."""
    mon = make_monitor(on_violation="ignore")
    r, a, uids = hazard_batch()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mon.observe_rollout(r, advantages=a, group_ids=uids)
        report = mon.end_step()
    assert [v.invariant for v in report.violations] == ["degenerate_zero"]
    assert report.metrics["grpo/invariants/violations"] == 1


@pytest.mark.parametrize(
    "policies, outcome",
    [({"degenerate_zero": "ignore"}, "recorded"), ({"degenerate_zero": "warn"}, "warned"),
     ({"finite": "ignore"}, "raised")],
    ids=["override-ignore", "override-warn", "other-invariant-overridden"],
)
def test_per_invariant_policy_overrides(make_monitor, policies, outcome):
    """A per-invariant policy replaces on_violation for that invariant only."""
    mon = make_monitor(on_violation="raise", policies=policies)
    r, a, uids = hazard_batch()
    if outcome == "raised":
        with pytest.raises(InvariantViolation):
            mon.observe_rollout(r, advantages=a, group_ids=uids)
        return
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        mon.observe_rollout(r, advantages=a, group_ids=uids)
        report = mon.end_step()
    assert [v.invariant for v in report.violations] == ["degenerate_zero"]
    assert bool([w for w in record if "degenerate_zero" in str(w.message)]) == (outcome == "warned")


def test_breaches_in_two_rollouts_of_one_step_name_their_own_groups(make_monitor):
    """Each rollout's breach is described from that rollout's groups (warn policy, eager checks)."""
    mon = make_monitor(on_violation="warn")
    r, a, uids = hazard_batch()
    r2 = binary(3, B=8)
    a2 = population(r2)
    a2[5] += 0.3  # group 5 off-centre
    with pytest.warns(RuntimeWarning):
        mon.observe_rollout(r, advantages=a, group_ids=uids)
        mon.observe_rollout(r2, advantages=a2)
    found = {v.invariant: v for v in mon.end_step().violations}
    assert found["degenerate_zero"].groups == ("uid-003",)
    assert found["zero_group_mean"].groups == (5,)


def test_one_collective_per_sync(make_monitor, monkeypatch):
    """The monitor reduces its statistics in one collective per sync: per rollout + step end, or per step."""
    calls = []
    real = sync_module.all_reduce_fields
    monkeypatch.setattr(sync_module, "all_reduce_fields", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    r = binary(4)
    for defer, expected in ((True, 1), (False, 3)):
        calls.clear()
        mon = make_monitor(defer_checks=defer)
        mon.observe_rollout(r, advantages=population(r))
        mon.observe_rollout(r, advantages=population(r))
        mon.observe_generation(r)
        mon.end_step()
        assert len(calls) == expected


def test_context_manager_finishes_sinks(make_monitor, recording_sink):
    """Leaving the with-block finishes every sink once; close() afterwards is a no-op."""
    with make_monitor(sinks=[recording_sink]) as mon:
        _advance(mon, 2)
    mon.close()
    assert recording_sink.finished == [False] and [s for s, _ in recording_sink.metrics] == [0, 1]


# ----------------------------------------------------------------- property


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), G=st.integers(2, 10), B=st.integers(1, 30), binary_rewards=st.booleans(),
       string_ids=st.booleans())
def test_row_permutation_with_ids_leaves_metrics_unchanged(make_monitor, seed, G, B, binary_rewards, string_ids):
    """Property: shuffling rows together with their group ids changes no metric."""
    gen = torch.Generator().manual_seed(seed)
    r = ((torch.rand(B, G, generator=gen) < 0.5).float() if binary_rewards else torch.rand(B, G, generator=gen))
    r[torch.rand(B, G, generator=gen) < 0.1] = float("nan")
    a = torch.nan_to_num((r - r.nanmean(1, keepdim=True)) / 0.5, nan=0.0)
    ids = np.repeat(np.array([f"q{i}" for i in range(B)] if string_ids else np.arange(B) * 7, dtype=object), G)
    perm = torch.randperm(B * G, generator=gen)
    reports = []
    for order in (torch.arange(B * G), perm):
        mon = make_monitor(on_violation="ignore")
        mon.observe_rollout(r.reshape(-1)[order], advantages=a.reshape(-1)[order], group_ids=list(ids[order.numpy()]))
        reports.append(mon.end_step())
    first, second = reports
    assert first.metrics.keys() == second.metrics.keys()
    for key, value in first.metrics.items():
        other = second.metrics[key]
        assert (math.isnan(value) and math.isnan(other)) or other == pytest.approx(value, rel=1e-9, abs=1e-12), key
    assert sorted(first.histograms["grpo/reward/question_std"]) == pytest.approx(
        sorted(second.histograms["grpo/reward/question_std"]), rel=1e-12, abs=1e-15)
    assert [v.invariant for v in first.violations] == [v.invariant for v in second.violations]


def test_advantage_histogram_is_a_bounded_sample_of_the_step_advantages():
    """report.histograms['grpo/adv/values'] holds at most 1024 of the step's own advantages, spread over the batch."""
    r = (torch.rand(3000, 4, generator=torch.Generator().manual_seed(0)) < 0.5).double()
    a = advantages(r, "population", 1e-4)
    mon = GRPOMonitor(MonitorConfig(group_size=4, strict=True))
    mon.observe_rollout(r, advantages=a)
    values = mon.end_step().histograms["grpo/adv/values"]
    flat = a.reshape(-1)
    assert 0 < len(values) <= 1024
    assert values == flat[:: -(-len(flat) // 1024)].tolist()
