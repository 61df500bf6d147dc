"""Sink faults: a sink raising OSError never stops training or starves the other sinks."""

from __future__ import annotations

import warnings

import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.sinks.base import Sink
from grpo_monitor.sinks.dispatch import SinkWarning
from grpo_monitor.sinks.jsonl import JSONLSink, read_jsonl
from references import advantages

R = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
ADV = advantages(R, "population", 1e-6)
STEPS = 40
#: Steps at which an always-failing sink is tried: after its k-th failure in a row it sits out
#: 2**(k-1) steps (1, 2, 4, 8) and the 5th failure disables it.
BACKOFF_ATTEMPTS = [0, 2, 5, 10, 19]


class FlakySink(Sink):
    """A user sink whose ``log_report`` raises OSError on the calls ``fails(n)`` picks (n counts from 1)."""

    name = "flaky"

    def __init__(self, fails, finish_fails: bool = False):
        self.fails = fails
        self.finish_fails = finish_fails
        self.calls = 0
        self.attempted: list[int] = []
        self.received: list[int] = []

    def log_report(self, report) -> None:
        self.calls += 1
        self.attempted.append(report.step)
        if self.fails(self.calls):
            raise OSError(28, "No space left on device")
        self.received.append(report.step)

    def finish(self, failed: bool = False) -> None:
        if self.finish_fails:
            raise OSError(5, "Input/output error")


def _run(sinks, steps: int = STEPS):
    """Train ``steps`` steps; return the reports and the grpo-monitor sink warnings."""
    mon = GRPOMonitor(MonitorConfig(on_violation="ignore", strict=True), sinks=sinks)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with mon:
            reports = []
            for _ in range(steps):
                mon.observe_rollout(R, advantages=ADV)
                reports.append(mon.end_step())
    return reports, [str(w.message) for w in caught if issubclass(w.category, SinkWarning)]


@pytest.mark.parametrize("flaky_first", [True, False], ids=["failing-sink-first", "failing-sink-last"])
def test_a_sink_failing_every_call_backs_off_then_is_disabled(flaky_first, tmp_path):
    """Always OSError: training runs every step, the JSONL sink gets every step, the bad sink is retried with
    backoff, then off."""
    flaky, good = FlakySink(lambda n: True), JSONLSink(tmp_path / "run.jsonl")
    reports, texts = _run([flaky, good] if flaky_first else [good, flaky])
    assert [r.step for r in reports] == list(range(STEPS))
    assert [rec["step"] for rec in read_jsonl(tmp_path / "run.jsonl")] == list(range(STEPS))
    assert flaky.attempted == BACKOFF_ATTEMPTS
    assert len([t for t in texts if "'flaky' failed at step 0" in t and "No space left" in t]) == 1
    assert len([t for t in texts if "'flaky' disabled after 5 consecutive failures" in t]) == 1
    assert len(texts) == 2


def test_a_sink_failing_every_other_call_is_retried_and_never_disabled(tmp_path):
    """OSError on every other call: warned once, never disabled, and each success resets its backoff."""
    flaky, good = FlakySink(lambda n: n % 2 == 1), JSONLSink(tmp_path / "run.jsonl")
    reports, texts = _run([flaky, good])
    assert [rec["step"] for rec in read_jsonl(tmp_path / "run.jsonl")] == list(range(STEPS))
    # fail at step s, sit out s+1, succeed at s+2, fail at s+3, ...: a period of three steps
    assert flaky.received == list(range(2, STEPS, 3))
    assert flaky.attempted == sorted(set(range(0, STEPS, 3)) | set(range(2, STEPS, 3)))
    assert texts == [t for t in texts if "'flaky' failed at step 0" in t] and len(texts) == 1


def test_a_real_jsonl_sink_on_an_unwritable_path_never_stops_training(tmp_path):
    """A JSONLSink pointed at a directory (every write is an OSError) is warned about, never disabled; the other
    sink is complete."""
    broken, good = JSONLSink(tmp_path), JSONLSink(tmp_path / "run.jsonl")
    reports, texts = _run([broken, good])
    assert len(reports) == STEPS
    assert len(read_jsonl(tmp_path / "run.jsonl")) == STEPS
    assert any("'jsonl' failed at step 0" in t and "never disabled" in t for t in texts)
    assert not any("disabled after" in t for t in texts)  # a durable sink keeps trying: no step given up


def test_a_sink_failing_to_finish_does_not_raise(tmp_path):
    """close() with a sink whose finish raises OSError warns and still finishes the others."""
    flaky, good = FlakySink(lambda n: False, finish_fails=True), JSONLSink(tmp_path / "run.jsonl")
    reports, texts = _run([flaky, good], steps=3)
    assert flaky.received == [0, 1, 2]
    assert [rec["step"] for rec in read_jsonl(tmp_path / "run.jsonl")] == [0, 1, 2]
    assert len(texts) == 1 and "failed to finish" in texts[0]
    assert good._fd is None  # closed although the sink before it raised


def test_a_durable_sink_outlasting_max_failures_resumes_when_the_fault_clears(tmp_path):
    """Eight steps with a file where the log's folder should be, then the folder is possible again:
    every later step is on disk and the recovery is announced with the count of lost records."""
    blocker = tmp_path / "logs"
    blocker.write_text("a file in the way")
    sink = JSONLSink(blocker / "run.jsonl")
    mon = GRPOMonitor(MonitorConfig(on_violation="ignore", strict=True), sinks=[sink])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(20):
            if step == 8:
                blocker.unlink()
            mon.observe_rollout(R, advantages=ADV)
            mon.end_step()
        mon.close()
    texts = [str(w.message) for w in caught if issubclass(w.category, SinkWarning)]
    assert [rec["step"] for rec in read_jsonl(blocker / "run.jsonl")] == list(range(8, 20))
    assert any("recovered at step 8 after 8 failed writes" in t for t in texts), texts
    assert not any("disabled after" in t for t in texts)
