"""A part switched off by an internal fault is retried on the next step, visibly, a bounded number of times."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import grpo_monitor.step.observe as observe_module
from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.catalog.metrics import DISABLED_PARTS_KEY as DISABLED
from grpo_monitor.catalog.metrics import RETRIED_PARTS_KEY as RETRIED
from grpo_monitor.step.guard import PART_FAULTS
from grpo_monitor.testing import RecordingSink
from references import advantages

R = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
ADV = advantages(R, "population", 1e-6)


class Boom(RuntimeError):
    """The injected fault."""


def _faulty_rollout_stats(monkeypatch, fail_on: set[int]):
    """``rollout_stats`` raising on the calls numbered in ``fail_on`` (0-based), exact otherwise."""
    real, calls = observe_module.rollout_stats, {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] - 1 in fail_on:
            raise Boom("injected fault")
        return real(*args, **kwargs)

    monkeypatch.setattr(observe_module, "rollout_stats", flaky)


def _nan_adv() -> torch.Tensor:
    bad = ADV.clone()
    bad[1, 2] = math.nan
    return bad


def _texts(caught) -> list[str]:
    texts = [str(w.message) for w in caught]
    return [t for t in texts if t.startswith("grpo-monitor") and "finite" not in t]


def test_a_transient_fault_switches_the_part_off_for_one_step_then_a_breach_is_caught(monkeypatch):
    """A fault at step 1 turns the rollout part off for step 1 only; step 2 is retried and step 3's NaN is caught."""
    _faulty_rollout_stats(monkeypatch, fail_on={1})
    sink = RecordingSink()
    mon = GRPOMonitor(MonitorConfig(on_violation="warn"), sinks=[sink])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reports = []
        for step in range(4):
            mon.observe_rollout(R, advantages=_nan_adv() if step == 3 else ADV)
            reports.append(mon.end_step())
    assert [r.metrics[DISABLED] for r in reports] == [0.0, 1.0, 0.0, 0.0]
    assert [r.metrics.get(RETRIED, 0.0) for r in reports] == [0.0, 0.0, 1.0, 0.0]
    assert "grpo/groups/total" not in reports[1].metrics and reports[2].metrics["grpo/groups/total"] == 3.0
    assert [v.invariant for v in reports[3].violations] == ["finite"]
    assert not mon.disabled_parts
    texts = _texts(caught)
    assert any("internal error in rollout; this part is off for the rest of step 1" in t
               and "retried at step 2" in t for t in texts), texts
    assert any("retrying the 'rollout' part at step 2" in t for t in texts), texts
    assert [m for _, m in sink.metrics][2][RETRIED] == 1.0  # the sinks see the retry, not only the return value


def test_a_persistent_fault_is_retried_a_bounded_number_of_times_then_stays_off(monkeypatch, caplog):
    """A part faulting on PART_FAULTS steps in a row stays off for the run, with one alert; every fault is warned."""
    _faulty_rollout_stats(monkeypatch, fail_on=set(range(100)))
    sink = RecordingSink()
    mon = GRPOMonitor(MonitorConfig(on_violation="warn"), sinks=[sink])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reports = []
        for _ in range(PART_FAULTS + 3):
            mon.observe_rollout(R, advantages=ADV)
            reports.append(mon.end_step())
    assert all(r.metrics[DISABLED] == 1.0 for r in reports)
    assert [r.metrics.get(RETRIED, 0.0) for r in reports] == [0.0] + [1.0] * (PART_FAULTS - 1) + [0.0] * 3
    assert mon.disabled_parts == {"rollout"}
    faults = [t for t in _texts(caught) if "internal error in rollout" in t]
    assert len(faults) == PART_FAULTS and "disabled for the rest of the run" in faults[-1]
    tracebacks = [r for r in caplog.records if r.name == "grpo_monitor" and r.exc_info is not None]
    assert len(tracebacks) == 1  # the traceback once, a line for every later fault
    assert [title for title, _ in sink.alerts] == ["grpo-monitor: part 'rollout' disabled"]


def test_a_success_resets_the_count_of_faults_in_a_row(monkeypatch):
    """Faults on alternate steps never add up to a switch-off: each retry that works resets the streak."""
    _faulty_rollout_stats(monkeypatch, fail_on=set(range(0, 2 * PART_FAULTS + 2, 2)))
    mon = GRPOMonitor(MonitorConfig(on_violation="warn"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2 * PART_FAULTS + 2):
            mon.observe_rollout(R, advantages=ADV)
            mon.end_step()
    mon.observe_rollout(R, advantages=ADV)
    assert mon.end_step().metrics["grpo/groups/total"] == 3.0 and not mon.disabled_parts


def test_a_retried_integration_part_comes_back(monkeypatch):
    """An integration's part (FailOpen) follows the same rule: off for the step of its fault, retried at the next."""
    from grpo_monitor.integrations._common import FailOpen

    mon = GRPOMonitor(MonitorConfig(on_violation="warn"))
    guard = FailOpen(mon, "toy")
    calls = []

    def observe(fail: bool):
        calls.append(mon.step)
        if fail:
            raise Boom("integration fault")

    with pytest.warns(RuntimeWarning, match="internal error in the toy integration"):
        guard(observe, True)
    guard(observe, False)  # same step: still off
    assert mon.end_step().metrics[DISABLED] == 1.0
    with pytest.warns(RuntimeWarning, match="retrying the 'toy integration' part at step 1"):
        guard(observe, False)
    assert calls == [0, 1] and mon.end_step().metrics[DISABLED] == 0.0


def test_a_scan_names_the_steps_a_transient_fault_left_unchecked(monkeypatch, tmp_path):
    """In `scan`, a fault at step 1 leaves only step 1 unchecked: the summary says 1 of 5 steps, the retried part
    catches step 3's NaN advantage, and the log shows the part off at step 1 only."""
    import json

    from grpo_monitor.sinks import read_jsonl
    from grpo_monitor.tools.scan import format_summary, scan_rollouts

    _faulty_rollout_stats(monkeypatch, fail_on={1})
    rows = [{"step": s, "group": g, "reward": float(r), "advantage": math.nan if (s, g, i) == (3, 0, 0) else float(a)}
            for s in range(5) for g in range(3) for i, (r, a) in enumerate(zip(R[g], ADV[g], strict=True))]
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = scan_rollouts(path, tmp_path / "out", group_size=4, estimator="population", quiet=True,
                               report=False, tensorboard=False)
    summary = format_summary(result)
    assert "switched its 'rollout' part off on 1 of 5 step(s) at step 1" in summary, summary
    assert "later steps" not in summary and result.errors >= 1
    records = list(read_jsonl(result.log))
    assert [r["metrics"][DISABLED] for r in records] == [0.0, 1.0, 0.0, 0.0, 0.0]
    assert [v["invariant"] for r in records for v in r["violations"]] == ["finite"]
    assert records[3]["violations"][0]["step"] == 3
