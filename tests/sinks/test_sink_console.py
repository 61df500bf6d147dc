"""ConsoleSink: a compact table every N steps and on every violation, rich or plain."""

from __future__ import annotations

import io

import pytest

from grpo_monitor.sinks import ConsoleSink


@pytest.mark.parametrize("use_rich", [True, False], ids=["rich", "plain"])
def test_prints_key_metrics_and_violations(make_report, make_violation, use_rich):
    """The table names the step, the convention, the key metrics and each violation."""
    if use_rich:
        pytest.importorskip("rich")
    out = io.StringIO()
    sink = ConsoleSink(every=10, file=out, use_rich=use_rich)
    sink.log_report(make_report(0, violations=[make_violation(0)], failed=True))
    text = " ".join(out.getvalue().split())  # rich wraps long lines
    assert "grpo-monitor step 0 (estimator: population)" in text
    assert "RUN STOPPED BY A BREACH" in text
    for label in ("degenerate rate", "degenerate rate (iid)", "KL k3 mean", "violations"):
        assert label in text
    assert "0.2%" in text, "degenerate rate 0.002 as a percentage"
    assert "VIOLATION" in text and "first offending groups: [3, 7]" in text


def test_prints_every_n_steps_and_on_violations(make_report, make_violation):
    """Steps 0, 10, 20 print; a step with a violation prints in between."""
    out = io.StringIO()
    sink = ConsoleSink(every=10, file=out, use_rich=False)
    for step in range(25):
        violations = [make_violation(step)] if step == 13 else []
        sink.log_report(make_report(step, violations=violations))
    printed = [int(line.split()[2]) for line in out.getvalue().splitlines() if line.startswith("grpo-monitor")]
    assert printed == [0, 10, 13, 20]


def test_non_finite_values_and_missing_keys(make_report):
    """NaN prints as nan, absent keys are left out, and every must be a positive int."""
    report = make_report(0)
    report.metrics = {"grpo/reward/mean": float("nan")}
    out = io.StringIO()
    ConsoleSink(file=out, use_rich=False).log_report(report)
    assert "reward mean nan" in out.getvalue() and "KL" not in out.getvalue()
    with pytest.raises(ValueError, match="`every` to be an int >= 1"):
        ConsoleSink(every=0)
