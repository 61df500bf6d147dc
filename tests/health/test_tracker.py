"""HealthTracker: findings open after their patience and clear after as long, figures match independent sums,
the state survives a resume, and the robust trend matches a brute-force enumeration."""

from __future__ import annotations

import itertools
import json
import math
import random

import numpy as np
import pytest

from grpo_monitor import MonitorConfig
from grpo_monitor.health import FINDINGS, HealthTracker, QuestionSupply
from grpo_monitor.health.memory import theil_sen
from grpo_monitor.health.state import FindingState


def _step(degenerate: float, groups: float = 8.0, **extra: float) -> dict[str, float]:
    return {"grpo/groups/total": groups, "grpo/groups/degenerate_rate": degenerate,
            "grpo/groups/degenerate_high_rate": degenerate, "grpo/groups/degenerate_low_rate": 0.0,
            "grpo/groups/effective_prompts": round(groups * (1 - degenerate)), **extra}


@pytest.mark.parametrize("values", [
    pytest.param([3.0, 2.5, 2.7, 1.9, 1.5, 1.6, 0.9], id="falling"),
    pytest.param([0.1, 0.1, 0.1, 0.1], id="flat"),
    pytest.param([1.0, 5.0, -2.0, 8.0, 3.0, 3.0, 9.5, -1.0, 0.0, 4.0], id="noisy"),
])
def test_theil_sen_matches_brute_force(values):
    """Median of all pairwise slopes and Kendall's tau, enumerated with itertools in float64."""
    pairs = list(itertools.combinations(range(len(values)), 2))
    slope = float(np.median([(values[j] - values[i]) / (j - i) for i, j in pairs]))
    tau = sum(np.sign(values[j] - values[i]) for i, j in pairs) / len(pairs)
    got = theil_sen(values)
    assert got[0] == pytest.approx(slope, abs=1e-12) and got[1] == pytest.approx(tau, abs=1e-12)


def test_a_finding_opens_after_its_patience_and_clears_after_as_long():
    """degenerate_dominated (patience 3) opens on the third degenerate step, clears on the third healthy one."""
    t = HealthTracker(MonitorConfig(group_size=4))
    patience = FINDINGS["degenerate_dominated"].patience
    opened, cleared = [], []
    series = [0.95] * 5 + [0.0] * 5
    for step, rate in enumerate(series):
        u = t.update(step, _step(rate))
        opened += [(step, f.name) for f in u.opened]
        cleared += [(step, n) for n in u.cleared]
    assert ("degenerate_dominated" in [n for _, n in opened])
    assert [s for s, n in opened if n == "degenerate_dominated"] == [patience - 1]
    assert [s for s, n in cleared if n == "degenerate_dominated"] == [5 + patience - 1]


@pytest.mark.parametrize("rate, severity", [pytest.param(0.9, "stalled", id="90%-stalled"),
                                            pytest.param(0.7, "degraded", id="70%-degraded"),
                                            pytest.param(0.4, None, id="40%-quiet")])
def test_degenerate_severity_follows_the_share(rate, severity):
    """The share over the patience decides: stalled from 80%, degraded from 60%, nothing below."""
    t = HealthTracker(None)
    for step in range(4):
        u = t.update(step, _step(rate))
    found = [f for f in u.active if f.name == "degenerate_dominated"]
    assert (found[0].severity if found else None) == severity
    assert u.status == {"stalled": 2, "degraded": 1, None: 0}[severity]


def test_wasted_generation_and_its_wall_clock_cost():
    """Wasted share = 1 - live token fraction; its seconds are the steps' seconds times that share; the cost
    is those hours times gpu_hour_cost times the processes."""
    t = HealthTracker(MonitorConfig(gpu_hour_cost=3.6), gpus=2)
    seconds = [10.0, 20.0, 30.0]
    live = [0.1, 0.2, 0.05]
    for step, (s, lf) in enumerate(zip(seconds, live, strict=True)):
        u = t.update(step, _step(0.9, **{"grpo/tokens/live_fraction": lf, "grpo/tokens/valid": 100.0}), seconds=s)
        assert u.metrics["grpo/health/wasted_generation_frac"] == pytest.approx(1 - lf)
    wasted = sum(s * (1 - lf) for s, lf in zip(seconds, live, strict=True))
    ev = next(f for f in u.active if f.name == "degenerate_dominated").evidence
    assert ev["wasted_seconds"] == pytest.approx(wasted)
    assert ev["wasted_cost"] == pytest.approx(wasted / 3600 * 3.6 * 2)


def test_zero_gradient_steps_counts_steps_without_valid_tokens():
    """Steps with no valid loss token count; the figure is their share of the steps so far."""
    t = HealthTracker(None)
    valid = [0, 0, 40, 0, 0, 0, 25, 0]
    for step, v in enumerate(valid):
        u = t.update(step, {"grpo/tokens/valid": float(v), "grpo/tokens/live_fraction": 1.0 if v else math.nan})
        want = sum(1 for x in valid[: step + 1] if x == 0) / (step + 1)
        assert u.metrics["grpo/health/zero_gradient_steps"] == pytest.approx(want)
    assert [f.name for f in u.active] == ["zero_gradient_steps"] and u.active[0].severity == "stalled"


def test_prompt_supply_from_the_question_classes():
    """Learnable share of the questions seen twice or more, below 25%: the supply is short (degraded)."""
    t = HealthTracker(None)
    supply = QuestionSupply(questions=40, repeated=20, saturated=30, unsolved=4, learnable=6,
                            repeated_saturated=15, repeated_unsolved=2)
    u = t.update(0, _step(0.5), supply=supply)
    assert u.metrics["grpo/health/prompt_supply"] == pytest.approx(3 / 20)
    assert u.metrics["grpo/health/supply_saturated_frac"] == pytest.approx(15 / 20)
    assert [f.name for f in u.opened] == ["prompt_supply"]


def test_entropy_collapse_names_the_steps_to_the_floor_before_it():
    """A steady fall from 3 nats by 0.1 per step: about (now - floor) / 0.1 steps left, named above the floor."""
    t = HealthTracker(MonitorConfig(entropy_floor=0.5))
    named = None
    for step in range(25):
        entropy = 3.0 - 0.1 * step
        u = t.update(step, {"grpo/tokens/valid": 100.0, "grpo/entropy/mean": entropy})
        if named is None and any(f.name == "entropy_collapse" for f in u.active):
            named = (step, entropy, u.metrics["grpo/health/entropy_collapse"])
    assert named is not None and named[1] > 0.5
    step, entropy, steps_left = named
    now = 3.0 - 0.1 * (step - 1)  # median of the last three values
    assert steps_left == pytest.approx((now - 0.5) / 0.1)


def test_reward_plateau_is_tested_against_the_measured_noise():
    """A flat reward with per-question noise: a plateau, once held for its patience (10 steps), within 60 steps;
    the same climbing 0.01 per step (about 12 standard errors of the measured noise between the window's
    halves): none."""
    rng = random.Random(0)
    for slope, plateau in ((0.0, True), (0.01, False)):
        t = HealthTracker(MonitorConfig(group_size=4))
        opened = False
        for step in range(60):
            m = {"grpo/groups/total": 64.0, "grpo/reward/mean": 0.3 + slope * step + rng.gauss(0, 0.02),
                 "grpo/reward/question_std_mean": 0.3}
            opened |= any(f.name == "reward_plateau" for f in t.update(step, m).active)
        assert opened is plateau, slope


def test_state_dict_resume_gives_the_same_findings(tmp_path):
    """Saved half way (through JSON), the tracker yields the same updates as the uninterrupted one."""
    steps = [_step(0.9 if s % 7 < 5 else 0.1, **{"grpo/entropy/mean": 3 - 0.05 * s}) for s in range(30)]
    full, first = HealthTracker(None), HealthTracker(None)
    want = [full.update(s, m).to_dict() for s, m in enumerate(steps)]
    for s, m in enumerate(steps[:15]):
        first.update(s, m)
    resumed = HealthTracker(None)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    got = [resumed.update(s, m).to_dict() for s, m in enumerate(steps[15:], start=15)]
    assert got == want[15:]


def test_a_bad_state_is_refused_whole():
    """A state missing its memory raises ValueError and leaves the tracker as it was."""
    t = HealthTracker(None)
    t.update(0, _step(0.9))
    before = t.state_dict()
    with pytest.raises(ValueError, match="HealthTracker.state_dict"):
        t.load_state_dict({"streaks": {}})
    assert t.state_dict() == before


def test_halt_on_matches_names_and_severities():
    """A severity matches itself and worse; a name matches that finding."""
    t = HealthTracker(None)
    for step in range(3):
        t.update(step, _step(0.7))  # degenerate_dominated, degraded
    assert [f.name for f in t.matching(("degraded",))] == ["degenerate_dominated"]
    assert t.matching(("stalled",)) == ()
    assert [f.name for f in t.matching(("degenerate_dominated",))] == ["degenerate_dominated"]


def test_unsupported_names_the_missing_evidence():
    """A recording with only rewards cannot show truncation, entropy, mismatch or lengths."""
    out = HealthTracker.unsupported({"grpo/groups/degenerate_rate", "grpo/reward/mean", "grpo/groups/total"})
    assert {"truncation_dominated", "entropy_collapse", "mismatch_drift", "length_bias"} <= set(out)
    assert "degenerate_dominated" not in out and "grpo/rows/truncated_rate" in out["truncation_dominated"]


def test_finding_state_round_trips_through_json():
    """to_dict is strict JSON (NaN as null) and from_dict reads it back."""
    f = FindingState("x", "degraded", 3, 1, math.nan, {"a": 1.0, "b": math.inf}, "m", ("r",))
    text = json.dumps(f.to_dict(), allow_nan=False)
    back = FindingState.from_dict(json.loads(text))
    assert back.name == "x" and math.isnan(back.figure) and math.isnan(back.evidence["b"])


def test_halt_on_refuses_unknown_names():
    """MonitorConfig(halt_on=) names findings or severities; a typo is a worded error."""
    with pytest.raises(ValueError, match="unknown finding"):
        MonitorConfig(halt_on=("stall",))
    assert MonitorConfig(halt_on="stalled").halt_on == ("stalled",)
