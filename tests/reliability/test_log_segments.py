"""`report` of a log whose steps go back: a run resumed from an earlier checkpoint into the same log, or two
processes writing one log. The breach that stopped the first run stays in the report (never "Clean"), every
record's violations are kept, and a note says what the report did."""

from __future__ import annotations

import re

import pytest
import torch

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig
from grpo_monitor.sinks.jsonl import JSONLSink, read_jsonl
from grpo_monitor.tools.reporting import load_run
from grpo_monitor.tools.reporting.html import segments_block, status_block
from references import advantages

R = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
GOOD = advantages(R, "population", 1e-6)
CHECKPOINT, BREACH, END = 5, 7, 10


def _step(mon: GRPOMonitor, step: int, flipped: bool = False) -> None:
    mon.observe_rollout(R, advantages=-GOOD if flipped else GOOD)
    mon.end_step()


def _resumed_log(tmp_path):
    """Steps 0-7 (a sign flip at 7 stops the run), then a resume from the step-5 checkpoint to step 10, one log."""
    log = tmp_path / "monitor.jsonl"
    first = GRPOMonitor(MonitorConfig(group_size=4), sinks=[JSONLSink(log)])
    for step in range(BREACH):
        _step(first, step)
        if step == CHECKPOINT - 1:
            checkpoint = first.state_dict()
    with pytest.raises(InvariantViolation):
        _step(first, BREACH, flipped=True)
    first.close()
    resumed = GRPOMonitor(MonitorConfig(group_size=4), sinks=[JSONLSink(log)])
    resumed.load_state_dict(checkpoint)
    for step in range(CHECKPOINT, END + 1):
        _step(resumed, step)
    resumed.close()
    return log


def test_a_run_resumed_into_its_own_log_keeps_the_breach_that_stopped_it(tmp_path):
    """The log (read back independently) holds step 7 twice, the first failed; the report shows the breach at
    step 7 as the stop, every step once, and a note naming both segments."""
    log = _resumed_log(tmp_path)
    steps = [r["step"] for r in read_jsonl(log)]
    assert steps == [*range(BREACH + 1), *range(CHECKPOINT, END + 1)]  # the reference: what the file holds
    run = load_run(log)
    assert run.steps.tolist() == list(range(END + 1))
    assert run.failed_step == BREACH and {m.step for m in run.violations} == {BREACH}
    assert "Clean" not in status_block(run) and f"stopped at step {BREACH}" in status_block(run)
    note = segments_block(run)
    assert f"steps 0-{BREACH}, stopped by a breach at step {BREACH}; then steps {CHECKPOINT}-{END}" in note, note
    assert "3 steps appear more than once" in note and "violations of every record are kept" in note


def test_two_writers_sharing_one_log_are_named(tmp_path):
    """Two monitors writing one log step by step (one of them breaks at its step 3 without raising): the note
    says more than one process writes it, and the other writer's clean record of step 3 hides no breach."""
    log = tmp_path / "monitor.jsonl"
    a = GRPOMonitor(MonitorConfig(group_size=4, on_violation="warn"), sinks=[JSONLSink(log)])
    b = GRPOMonitor(MonitorConfig(group_size=4), sinks=[JSONLSink(log)])
    with pytest.warns(RuntimeWarning):
        for step in range(6):
            _step(a, step, flipped=step == 3)
            _step(b, step)
    a.close()
    b.close()
    run = load_run(log)
    assert {m.step for m in run.violations} == {3} and run.failed_step is None
    assert "Clean" not in status_block(run)
    assert re.search(r"steps go back 6 times, mostly by one step: more than one process writes", run.segments_note)


def test_one_writer_with_extra_records_of_a_step_has_no_note(tmp_path):
    """A step's extra partial record (JSONLSink.log: add_metrics-style) is no restart: no note, no false alarm."""
    log = tmp_path / "monitor.jsonl"
    mon = GRPOMonitor(MonitorConfig(group_size=4), sinks=[JSONLSink(log)])
    for step in range(4):
        _step(mon, step)
        JSONLSink(log).log({"user/extra": 1.0}, step)
    mon.close()
    run = load_run(log)
    assert run.segments_note == "" and segments_block(run) == "" and "Clean" in status_block(run)
