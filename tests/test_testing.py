"""grpo_monitor.testing: the public helpers users test their own code with (RecordingSink, capture_reports)."""

from __future__ import annotations

import doctest

import pytest
import torch

import grpo_monitor.testing
from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig
from grpo_monitor.testing import RecordingSink, capture_reports
from references import advantages

R = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
ADV = advantages(R, "population", 1e-6)
NOT_FINITE = ADV.clone()
NOT_FINITE[0, 0] = float("nan")


def test_doctests_pass():
    """The module's examples run as written."""
    result = doctest.testmod(grpo_monitor.testing, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_recording_sink_keeps_every_call_in_order(recording_sink):
    """The conftest fixture is the public sink; it is synchronous and keeps reports, scalars, tables and finish."""
    assert isinstance(recording_sink, RecordingSink) and recording_sink.synchronous
    mon = GRPOMonitor(MonitorConfig(table_every=1, on_violation="ignore"), sinks=[recording_sink])
    with mon:
        for step in range(2):
            mon.observe_rollout(R, advantages=ADV, question_ids=["a", "b"])
            mon.end_step()
            assert len(recording_sink.reports) == step + 1  # written when end_step returns
    assert [s for s, _ in recording_sink.metrics] == [0, 1]
    assert recording_sink.metrics[0][1] == recording_sink.reports[0].metrics
    assert {key for _, key, _ in recording_sink.histograms} >= {"grpo/reward/question_std"}
    assert [key for _, key, _ in recording_sink.tables] == ["grpo/questions"] * 2
    assert recording_sink.finished == [False] and recording_sink.alerts == []


def test_capture_reports_collects_only_inside_the_block():
    """Steps before and after the block are not captured, and the collector leaves the monitor's sinks."""
    mon = GRPOMonitor(MonitorConfig())
    sinks_before = list(mon.sinks.sinks)
    mon.end_step()
    with capture_reports(mon) as reports:
        mon.observe_rollout(R, advantages=ADV)
        returned = mon.end_step()
        mon.end_step()
    mon.end_step()
    assert [r.step for r in reports] == [1, 2] and reports[0] is returned
    assert reports[0].metrics["grpo/groups/degenerate_rate"] == 0.5
    assert mon.sinks.sinks == sinks_before


def test_capture_reports_keeps_the_failing_step_when_the_block_raises(tmp_path):
    """Under the "raise" policy the breach leaves the block; the failing report is captured, the collector removed."""
    mon = GRPOMonitor(MonitorConfig(repro_dir=str(tmp_path)))
    with pytest.raises(InvariantViolation, match="finite"):
        with capture_reports(mon) as reports:
            mon.observe_rollout(R, advantages=NOT_FINITE)
    assert len(reports) == 1 and reports[0].failed
    assert [v.invariant for v in reports[0].violations] == ["finite"]
    assert mon.sinks.sinks == []


def test_capture_reports_records_on_every_rank():
    """A rank other than 0 skips main-process sinks; the capture still sees that rank's reports."""
    skipped = RecordingSink()
    mon = GRPOMonitor(MonitorConfig(), sinks=[skipped])
    mon.sinks.is_main_process = False
    with capture_reports(mon) as reports:
        mon.observe_rollout(R, advantages=ADV)
        mon.end_step()
    assert len(reports) == 1 and skipped.reports == []
