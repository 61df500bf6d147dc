"""After close() nothing is written or reopened; copies and pickles of a monitor are refused clearly."""

from __future__ import annotations

import copy
import json
import pickle

import pytest
import torch

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig
from grpo_monitor.sinks.jsonl import JSONLSink
from grpo_monitor.step.guard import MonitorClosedError
from references import advantages

R = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 1.0]])
ADV = advantages(R, "population", 1e-6)

CALLS = [
    pytest.param(lambda m: m.observe_rollout(R, advantages=ADV), "observe_rollout", id="observe_rollout"),
    pytest.param(lambda m: m.observe_generation(R), "observe_generation", id="observe_generation"),
    pytest.param(lambda m: m.observe_loss(mask=torch.ones(2, 3)), "observe_loss", id="observe_loss"),
    pytest.param(lambda m: m.add_metrics({"custom/x": 1.0}), "add_metrics", id="add_metrics"),
    pytest.param(lambda m: m.end_step(), "end_step", id="end_step"),
]


def _monitor(tmp_path, **config) -> tuple[GRPOMonitor, JSONLSink]:
    sink = JSONLSink(tmp_path / "monitor.jsonl")
    return GRPOMonitor(MonitorConfig(group_size=4, repro_dir=str(tmp_path / "repro"), **config), sinks=[sink]), sink


def _lines(tmp_path) -> list[dict]:
    return [json.loads(x) for x in (tmp_path / "monitor.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("call, name", CALLS)
def test_every_public_call_after_close_raises_naming_it(tmp_path, call, name):
    """A call on a closed monitor raises a RuntimeError naming the call and reopens nothing."""
    mon, sink = _monitor(tmp_path)
    mon.observe_rollout(R, advantages=ADV)
    mon.end_step()
    mon.close()
    with pytest.raises(MonitorClosedError, match=rf"GRPOMonitor\.{name}\(\) called on a closed monitor") as info:
        call(mon)
    assert isinstance(info.value, RuntimeError)
    assert sink._fd is None and len(_lines(tmp_path)) == 1


@pytest.mark.parametrize("call, name", CALLS)
def test_calls_after_a_caught_breach_raise_too(tmp_path, call, name):
    """The breach closes the monitor; a loop that catches it and goes on gets a clear error, not a new file."""
    mon, sink = _monitor(tmp_path)
    with pytest.raises(InvariantViolation):
        mon.observe_rollout(R, advantages=-ADV)
    with pytest.raises(MonitorClosedError, match="breach at step 0 closed it"):
        call(mon)
    assert sink._fd is None and [r["failed"] for r in _lines(tmp_path)] == [True]


def test_a_second_close_is_harmless_and_state_dict_still_works(tmp_path):
    """close() twice finishes the sinks once; the state can still be read for a checkpoint."""
    mon, _ = _monitor(tmp_path)
    mon.close()
    mon.close()
    with mon:
        pass
    assert mon.state_dict()["step"] == 0


def test_reopen_starts_a_new_segment_explicitly(tmp_path):
    """reopen() (what the HF integration calls on a second train()) appends to the same log."""
    mon, _ = _monitor(tmp_path)
    mon.end_step()
    mon.close()
    mon.reopen()
    mon.end_step()
    mon.close()
    assert [r["step"] for r in _lines(tmp_path)] == [0, 1]


@pytest.mark.parametrize("how", [copy.deepcopy, copy.copy, pickle.dumps], ids=["deepcopy", "copy", "pickle"])
def test_copies_and_pickles_are_refused_with_the_way_out(tmp_path, how):
    """A copy would share the JSONL descriptor: refused, naming state_dict() as the way to carry state."""
    mon, _ = _monitor(tmp_path)
    mon.end_step()
    with pytest.raises(TypeError, match=r"cannot be pickled or copied.*state_dict\(\)"):
        how(mon)
    mon.end_step()  # the original is untouched
    mon.close()
    assert [r["step"] for r in _lines(tmp_path)] == [0, 1]


def test_state_carries_over_to_a_new_monitor(tmp_path):
    """The documented way out: state_dict() into a fresh monitor continues the step counter."""
    mon, _ = _monitor(tmp_path)
    mon.observe_rollout(R, advantages=ADV, question_ids=["a", "b"])
    mon.end_step()
    other = GRPOMonitor(MonitorConfig(group_size=4))
    other.load_state_dict(pickle.loads(pickle.dumps(mon.state_dict())))
    assert other.end_step().step == 1
