"""The step pipeline: a failing step's report carries every metric of its step, whichever sync raised."""

from __future__ import annotations

import pytest
import torch

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig
from references import advantages

G = 4
R = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
ADV = advantages(R, "population", 1e-6)
QUESTIONS = ["q0", "q1", "q2"]


def _step(mon: GRPOMonitor, adv: torch.Tensor) -> None:
    mon.observe_generation(R, question_ids=QUESTIONS, lengths=torch.full(R.shape, 7))
    mon.observe_loss(mask=torch.ones(3 * G, 5), logprobs=torch.zeros(3 * G, 5), ref_logprobs=torch.zeros(3 * G, 5))
    mon.observe_rollout(R, advantages=adv, question_ids=QUESTIONS)
    mon.end_step()


@pytest.mark.parametrize("defer", [False, True], ids=["eager-raise", "deferred-raise"])
def test_a_failing_step_reports_its_ledger_and_question_metrics(defer, recording_sink, tmp_path):
    """A sign flip at step 2: its report has every key a healthy step has (ledger, per-question, tokens),
    with the same ledger values, plus the violation counts."""
    mon = GRPOMonitor(MonitorConfig(group_size=G, defer_checks=defer, repro_dir=str(tmp_path)), sinks=[recording_sink])
    _step(mon, ADV)
    _step(mon, ADV)
    with pytest.raises(InvariantViolation):
        _step(mon, -ADV)
    healthy, failing = recording_sink.reports[1], recording_sink.reports[2]
    assert failing.failed and failing.step == 2
    missing = set(healthy.metrics) - set(failing.metrics)
    assert not missing, f"the failing report lost {sorted(missing)}"
    for key in ("grpo/sampling/generated_groups", "grpo/sampling/generated_tokens", "grpo/groups/degenerate_rate",
                "grpo/sampling/stuck_questions"):
        assert failing.metrics[key] == healthy.metrics[key], key
    assert failing.metrics["grpo/sampling/total_generated_groups"] == 9.0
    assert failing.metrics["grpo/invariants/violations"] >= 1
    assert failing.histograms.keys() == healthy.histograms.keys()


def test_the_rollout_check_returns_the_narrowed_lock_and_leaves_the_given_one_alone():
    """check_rollout is pure: the lock it is given keeps its state; the lock it returns is the one the
    monitor's run ends up with after the same steps (population, then Bessel: the change is found)."""
    from grpo_monitor.estimators.judge import EstimatorJudge
    from grpo_monitor.step import observe
    from grpo_monitor.step.accumulator import ROLLOUT
    from grpo_monitor.step.checks import check_rollout

    cfg = MonitorConfig(group_size=G, on_violation="ignore")
    lock, mon = EstimatorJudge(cfg), GRPOMonitor(cfg)
    for step, adv in enumerate([ADV, ADV, advantages(R, "bessel", 1e-6)]):
        vec, record = observe.rollout_input(cfg, R, advantages=adv)
        before = lock.state_dict()
        checked = check_rollout(ROLLOUT.to_dict(vec.tolist()), [record], lock, cfg, step)
        assert lock.state_dict() == before
        lock = checked.lock
        mon.observe_rollout(R, advantages=adv)
        report = mon.end_step()
        assert [v.invariant for v in checked.found] == [v.invariant for v in report.violations]
        assert checked.judged is not None and checked.judged.name == report.estimator
        assert lock.state_dict() == mon.state_dict()["conventions"]
    assert [v.invariant for v in checked.found] == ["convention"]
