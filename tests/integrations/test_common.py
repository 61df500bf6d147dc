"""What the integrations share: their own faults never stop training; breaches always do."""

from __future__ import annotations

import pytest

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig
from grpo_monitor.catalog.metrics import DISABLED_PARTS_KEY
from grpo_monitor.integrations._common import FailOpen, find_trainer
from grpo_monitor.step.guard import PART_FAULTS
from grpo_monitor.testing import RecordingSink


def _boom():
    raise KeyError("a trainer attribute the integration expected")


def test_an_internal_fault_is_warned_once_and_disables_the_integration():
    """A KeyError inside observation code: one RuntimeWarning, then the integration stays off."""
    guard = FailOpen(GRPOMonitor(MonitorConfig()), "trl")
    with pytest.warns(RuntimeWarning, match="internal error in the trl integration"):
        assert guard(_boom) is None
    assert guard.disabled and guard(lambda: 1) is None


def test_strict_reraises_and_breaches_always_propagate():
    """With config.strict the fault re-raises; an InvariantViolation propagates whatever the mode."""
    with pytest.raises(KeyError):
        FailOpen(GRPOMonitor(MonitorConfig(strict=True)), "verl")(_boom)

    def breach():
        raise InvariantViolation([])

    with pytest.raises(InvariantViolation):
        FailOpen(GRPOMonitor(MonitorConfig()), "verl")(breach)


def test_a_switched_off_integration_shows_like_a_monitor_part(caplog):
    """The fault goes through the monitor's own bookkeeping: disabled_parts, the metric, retries, one alert, one
    traceback."""
    sink = RecordingSink()
    mon = GRPOMonitor(MonitorConfig(), sinks=[sink])
    assert mon.end_step().metrics[DISABLED_PARTS_KEY] == 0.0
    guard = FailOpen(mon, "trl")
    calls = []
    with pytest.warns(RuntimeWarning, match="internal error in the trl integration"):
        for _ in range(PART_FAULTS):  # off for the rest of each step, retried on the next, then off for good
            guard(lambda: calls.append(mon.step) or _boom())
            guard(lambda: calls.append(mon.step) or _boom())  # the same step: not called again
            assert mon.end_step().metrics[DISABLED_PARTS_KEY] == 1.0
        guard(lambda: calls.append(mon.step) or _boom())
    assert calls == [1, 2, 3] and mon.disabled_parts == {"trl integration"}
    assert [mon.end_step().metrics[DISABLED_PARTS_KEY] for _ in range(2)] == [1.0, 1.0]
    alerts = [(title, text) for title, text in sink.alerts if "disabled" in title]
    assert len(alerts) == 1 and "'trl integration'" in alerts[0][1] and "invariant checks are OFF" in alerts[0][1]
    assert sum(r.exc_info is not None for r in caplog.records if "trl integration" in r.getMessage()) == 1


def test_find_trainer_outside_a_trainer_says_what_to_do():
    """A callback called outside a Trainer's callback handler gets a worded error naming attach()."""
    with pytest.raises(RuntimeError, match=r"could not find the trainer.*attach\(trainer\)"):
        find_trainer(object())


def test_auto_without_tracker_settings_ignores_wandbs_disabled_run(tmp_path, monkeypatch, capsys):
    """Trackers unknown: an enabled W&B run is followed, the no-op run of wandb.init(mode="disabled") is not
    (its numbers would go nowhere): a JSONL log instead, its path printed."""
    wandb = pytest.importorskip("wandb")
    from grpo_monitor.integrations._entrypoint import Declared, auto_sinks

    monkeypatch.setenv("GRPO_MONITOR_LOG_DIR", str(tmp_path))
    run = wandb.init(mode="disabled")
    try:
        assert wandb.run is run and run.disabled
        (sink,) = auto_sinks("test", Declared(None))
    finally:
        wandb.finish()
    assert type(sink).__name__ == "JSONLSink"
    assert str(tmp_path / "grpo-monitor" / "monitor.jsonl") in capsys.readouterr().err
    run = wandb.init(mode="offline", dir=str(tmp_path))
    try:
        assert [type(s).__name__ for s in auto_sinks("test", Declared(None))] == ["WandbSink"]
    finally:
        wandb.finish()
        wandb.teardown()  # the disabled init leaves wandb's process-wide settings behind for later tests
