"""Fail-open: the monitor's own faults are logged once, disable the failing part, and never stop training."""

from __future__ import annotations

import logging
import sys
import types
import warnings

import pytest
import torch

import grpo_monitor
import grpo_monitor.monitor as monitor_module
import grpo_monitor.step.observe as observe_module
import grpo_monitor.step.sync as sync_module
from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.catalog.metrics import DISABLED_PARTS_KEY as DISABLED
from grpo_monitor.estimators.classic import ConventionTracker
from grpo_monitor.run.history import QuestionHistory
from grpo_monitor.step.guard import PART_FAULTS
from references import advantages

R = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0]])
ADV = advantages(R, "population", 1e-6)
QUESTIONS = ["q0", "q1", "q2"]


class Boom(RuntimeError):
    """The injected fault."""


def _raise(*args, **kwargs):
    raise Boom("injected fault")


def _step(mon: GRPOMonitor, step: int | None = None):
    """One training step as a trainer drives it: generation ledger, retained rollout, end of step."""
    mon.observe_generation(R, question_ids=QUESTIONS, lengths=torch.full(R.shape, 5))
    mon.observe_rollout(R, advantages=ADV, question_ids=QUESTIONS)
    return mon.end_step(step)


def _tracebacks(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "grpo_monitor" and r.exc_info is not None]


def _monitor(**config) -> GRPOMonitor:
    return GRPOMonitor(MonitorConfig(**{"on_violation": "warn", **config}))


# the patched name, the part it breaks, a metric of a part that must keep working
FAULTS = [
    pytest.param(lambda mp: mp.setattr(observe_module, "rollout_stats", _raise), "rollout",
                 "grpo/sampling/generated_groups", id="rollout_stats"),
    pytest.param(lambda mp: mp.setattr(ConventionTracker, "update", _raise), "rollout",
                 "grpo/sampling/generated_groups", id="convention-check"),
    pytest.param(lambda mp: mp.setattr(observe_module, "group_reward_stats", _raise), "generation",
                 "grpo/groups/degenerate_rate", id="generation-stats"),
]


@pytest.mark.parametrize("inject, part, survivor", FAULTS)
def test_a_fault_disables_its_part_and_training_continues(inject, part, survivor, monkeypatch, caplog):
    """Five steps of a persistent fault: no exception, one traceback, a warning per try, the part off, the others on."""
    inject(monkeypatch)
    mon = _monitor()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reports = [_step(mon) for _ in range(5)]
    assert [r.step for r in reports] == [0, 1, 2, 3, 4] and mon.step == 5
    assert len(_tracebacks(caplog)) == 1 and _tracebacks(caplog)[0].exc_info[0] is Boom
    assert part in _tracebacks(caplog)[0].getMessage()
    internal = [w for w in caught if "internal error" in str(w.message)]
    assert len(internal) == PART_FAULTS and all(part in str(w.message) for w in internal)  # retried, then off
    assert mon.disabled_parts == {part}
    assert all(survivor in r.metrics for r in reports)


def test_other_parts_report_exact_values_after_a_rollout_fault(monkeypatch):
    """With the rollout part off, the retry ledger still counts exactly what was generated."""
    monkeypatch.setattr(observe_module, "rollout_stats", _raise)
    mon = _monitor()
    with pytest.warns(RuntimeWarning, match="internal error in rollout"):
        reports = [_step(mon) for _ in range(3)]
    for i, report in enumerate(reports):
        assert report.metrics["grpo/sampling/generated_groups"] == 3.0
        assert report.metrics["grpo/sampling/generated_responses"] == 12.0
        assert report.metrics["grpo/sampling/generated_tokens"] == 60.0
        assert report.metrics["grpo/sampling/total_generated_groups"] == 3.0 * (i + 1)
        assert "grpo/groups/total" not in report.metrics


def test_a_fault_after_the_rollout_was_recorded_drops_its_data(monkeypatch):
    """A fault in the eager check drops the half-recorded rollout, so end_step does not trip on it again."""
    monkeypatch.setattr(ConventionTracker, "update", _raise)
    mon = _monitor()
    with pytest.warns(RuntimeWarning):
        report = _step(mon)
    assert mon.disabled_parts == {"rollout"}
    assert "grpo/groups/total" not in report.metrics and report.metrics["grpo/sampling/generated_groups"] == 3.0


def test_a_faulty_loss_part_leaves_the_rollout_working(monkeypatch):
    """A fault in the token statistics disables observe_loss only; rollout metrics stay exact."""
    fake = types.ModuleType("grpo_monitor.stats.tokens")
    fake.validate_token_inputs = lambda *a, **k: None
    fake.token_sufficient_stats = _raise
    monkeypatch.setitem(sys.modules, "grpo_monitor.stats.tokens", fake)
    monkeypatch.setattr(grpo_monitor.stats, "tokens", fake, raising=False)
    mon = _monitor()
    with pytest.warns(RuntimeWarning, match="internal error in loss"):
        for _ in range(2):
            mon.observe_loss(mask=torch.ones(3, 4), advantages=ADV)
            report = _step(mon)
    assert mon.disabled_parts == {"loss"}
    assert report.metrics["grpo/groups/total"] == 3.0
    assert report.metrics["grpo/groups/degenerate_rate"] == 1 / 3


@pytest.mark.parametrize("error", [Boom, ValueError, TypeError, KeyError, ZeroDivisionError])
def test_internal_value_and_type_errors_are_faults_not_input_errors(error, monkeypatch, caplog):
    """A ValueError/TypeError raised deep inside (not at the boundary) fails open like any fault."""
    def fail(*args, **kwargs):
        raise error("deep inside")

    monkeypatch.setattr(QuestionHistory, "update", fail)
    mon = _monitor()
    with pytest.warns(RuntimeWarning, match="internal error assembling a step report"):
        report = _step(mon)
    assert report.step == 0 and mon.step == 1
    assert report.metrics == {"grpo/invariants/violations": 0.0, DISABLED: 0.0}  # a metric fault: checks ran
    assert len(_tracebacks(caplog)) == 1 and not mon.disabled_parts


# ------------------------------------------------------------------ end_step faults
def test_a_transient_end_step_fault_skips_one_step_only(monkeypatch, caplog):
    """end_step failing once: that step's report is empty, the counter advances, the next step reports."""
    real = sync_module.all_reduce_fields
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise Boom("transient")
        return real(*args, **kwargs)

    monkeypatch.setattr(sync_module, "all_reduce_fields", flaky)
    mon = _monitor(defer_checks=True)  # one sync per step, at end_step
    with pytest.warns(RuntimeWarning, match="internal error in end_step; this step is skipped"):
        reports = [_step(mon) for _ in range(4)]
    assert [r.step for r in reports] == [0, 1, 2, 3]
    assert reports[1].metrics == {DISABLED: 0.0}
    for r in (reports[0], reports[2], reports[3]):
        assert r.metrics["grpo/groups/total"] == 3.0
    assert not mon.disabled_parts and len(_tracebacks(caplog)) == 1


def test_a_persistent_end_step_fault_disables_it_and_steps_still_advance(monkeypatch, caplog):
    """end_step failing every time: disabled after three in a row; later steps still close and count."""
    monkeypatch.setattr(sync_module, "all_reduce_fields", _raise)
    mon = _monitor(defer_checks=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reports = [_step(mon) for _ in range(6)]
        reports.append(_step(mon, step=10))
    assert [r.step for r in reports] == [0, 1, 2, 3, 4, 5, 10] and mon.step == 11
    assert [r.metrics for r in reports] == [{DISABLED: 0.0}] * 2 + [{DISABLED: 1.0}] * 5  # the switch-off shows
    assert mon.disabled_parts == {"end_step"}
    assert len(_tracebacks(caplog)) == 1
    texts = [str(w.message) for w in caught if "internal error" in str(w.message)]
    assert texts == [f"grpo-monitor: internal error in end_step; this step is skipped (at step {i}; see the log)"
                     for i in (0, 1)] + [
        "grpo-monitor: internal error in end_step; this part is disabled for the rest of the run (at step 2; "
        "see the log)"]


def test_the_step_state_is_reset_after_an_end_step_fault(monkeypatch):
    """Data observed before a failed end_step never leaks into the next step's metrics."""
    real = sync_module.all_reduce_fields
    fail = {"on": True}

    def once(*args, **kwargs):
        if fail.pop("on", False):
            raise Boom("once")
        return real(*args, **kwargs)

    monkeypatch.setattr(sync_module, "all_reduce_fields", once)
    mon = _monitor(defer_checks=True)
    with pytest.warns(RuntimeWarning):
        _step(mon)
    assert _step(mon).metrics["grpo/sampling/generated_groups"] == 3.0  # not 6: the failed step was dropped


# ------------------------------------------------------------------ strict
@pytest.mark.parametrize("inject", [
    pytest.param(lambda mp: mp.setattr(observe_module, "rollout_stats", _raise), id="rollout"),
    pytest.param(lambda mp: mp.setattr(observe_module, "group_reward_stats", _raise), id="generation"),
    pytest.param(lambda mp: mp.setattr(monitor_module, "assemble_report", _raise), id="end_step"),
])
def test_strict_mode_raises_the_fault(inject, monkeypatch):
    """With strict=True (the project's own tests) the injected fault propagates unchanged."""
    inject(monkeypatch)
    mon = _monitor(strict=True)
    with pytest.raises(Boom):
        _step(mon)
    assert not mon.disabled_parts


def test_no_fault_no_warning_no_log(caplog):
    """A healthy run logs nothing, warns nothing and disables nothing."""
    mon = _monitor()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            _step(mon)
    assert not _tracebacks(caplog) and not mon.disabled_parts


# ------------------------------------------------------------------ visibility
def test_a_switched_off_part_shows_as_a_metric_and_one_alert(monkeypatch, recording_sink):
    """Checking switched off is never silent: grpo/monitor/disabled_parts every step, one alert per part."""
    monkeypatch.setattr(observe_module, "rollout_stats", _raise)
    mon = GRPOMonitor(MonitorConfig(on_violation="warn"), sinks=[recording_sink])
    with pytest.warns(RuntimeWarning, match="internal error in rollout"):
        reports = [_step(mon) for _ in range(3)]
    assert [r.metrics[DISABLED] for r in reports] == [1.0, 1.0, 1.0]
    assert [m[DISABLED] for _, m in recording_sink.metrics] == [1.0, 1.0, 1.0]
    alerts = [a for a in recording_sink.alerts if "disabled" in a[0]]
    assert len(alerts) == 1 and "'rollout'" in alerts[0][0] and "invariant checks are OFF" in alerts[0][1]


@pytest.mark.parametrize("defer", [False, True], ids=["eager", "deferred"])
def test_a_broken_metric_never_switches_checking_off(monkeypatch, defer):
    """With the question history failing every step, a sign flip at step 5 is still raised."""
    monkeypatch.setattr(QuestionHistory, "update", _raise)
    mon = GRPOMonitor(MonitorConfig(defer_checks=defer))
    with pytest.warns(RuntimeWarning, match="assembling a step report"):
        for _ in range(5):
            _step(mon)
    assert not mon.disabled_parts
    with pytest.raises(grpo_monitor.InvariantViolation, match="affine_in_rewards|zero_group_mean"):
        mon.observe_rollout(R, advantages=-ADV, question_ids=QUESTIONS)
        mon.end_step()
