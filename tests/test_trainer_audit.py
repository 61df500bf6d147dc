"""audit_trainer_metrics: the boundary's worded errors, the tolerance, the cause test, the mapping table's shape."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.catalog.metrics import METRICS
from grpo_monitor.catalog.trainer_keys import CAUSES, NO_COUNTERPART, TRAINER_KEYS, trainer_key
from grpo_monitor.step.inputs.tensors import InputTypeError, InputValueError
from grpo_monitor.step.trainer_audit import AuditContext, diagnose
from grpo_monitor.tools.scan.logged import LOGGED_KEYS, NOT_MAPPED


def _monitor() -> GRPOMonitor:
    mon = GRPOMonitor(MonitorConfig(group_size=2, on_violation="warn"))
    mon.observe_rollout(torch.tensor([[1.0, 0.0], [1.0, 1.0]]), advantages=torch.tensor([[1.0, -1.0], [0.0, 0.0]]))
    return mon


@pytest.mark.parametrize("args, kwargs, error, text", [
    pytest.param(("TRL", {"rewards": 1.0}), {}, InputValueError, "TRL key 'rewards' is not audited", id="unknown-key"),
    pytest.param(("trl", {"reward": 1.0}), {}, InputValueError, "unknown framework 'trl'", id="unknown-framework"),
    pytest.param(("TRL", [1.0]), {}, InputTypeError, "logged must be a dict", id="not-a-dict"),
    pytest.param(("TRL", {"reward": "high"}), {}, InputTypeError, "'reward' must be a number", id="not-a-number"),
    pytest.param(("TRL", {"reward": 1.0}), {"world_size": 0}, InputValueError, "world_size must be an int >= 1",
                 id="world-size"),
    pytest.param(("TRL", {"reward": 1.0}), {"of_step": -1}, InputValueError, "of_step must be None", id="of-step"),
])
def test_bad_input_is_worded(args, kwargs, error, text):
    """Each bad argument raises the user's error naming it, before anything is recorded."""
    with pytest.raises(error, match=text):
        _monitor().audit_trainer_metrics(*args, **kwargs)


def test_within_tolerance_is_quiet_and_beyond_is_a_warning():
    """The degenerate rate is 1/2: 0.5 + 5e-7 agrees (atol 1e-6), 0.5 + 2e-6 is off; a NaN value is no measurement."""
    for value, off in ((0.5 + 5e-7, 0), (0.5 + 2e-6, 1), (math.nan, None)):
        mon = _monitor()
        mon.audit_trainer_metrics("TRL", {"frac_reward_zero_std": value})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            report = mon.end_step()
        assert report.metrics.get("grpo/trainer_metrics/mismatched") == off
        assert [v.severity for v in report.violations] == ["warning"] * (off or 0)


@pytest.mark.parametrize("key, trainer, exact, ctx, cause", [
    pytest.param(("verl", "actor/entropy_loss"), 4.0, 2.0, AuditContext(world_size=2), "dp_sum", id="dp-sum"),
    pytest.param(("verl", "actor/entropy"), 0.5, 2.0, AuditContext(accumulation_steps=4), "accumulation_scaling",
                 id="accumulation"),
    pytest.param(("SkyRL", "policy_entropy"), 1.5, 1.99, AuditContext(world_size=2), "per_rank_means", id="ranks"),
    pytest.param(("TRL", "frac_reward_zero_std"), 0.0, 0.5, AuditContext(), "float32_zero_std", id="float32"),
    pytest.param(("TRL", "entropy"), 3.1, 3.2, AuditContext(accumulation_steps=3, windows=(3, 1)),
                 "micro_batch_averaging", id="uneven-window"),
    pytest.param(("verl", "response_length/clip_ratio"), 0.25, 0.5, AuditContext(), "missed_cap", id="missed-cap"),
])
def test_diagnose_names_the_cause(key, trainer, exact, ctx, cause):
    """The cause a finding names, from the context's factors first, then the key's own causes."""
    assert diagnose(TRAINER_KEYS[key], trainer, exact, ctx) == cause


def test_the_table_is_one_home():
    """Every record names known causes and a monitor key that exists; scan's LOGGED_KEYS derive from it."""
    for record in TRAINER_KEYS.values():
        assert set(record.causes) <= set(CAUSES), record.key
        assert record.quantity == "exact" or record.quantity in METRICS, record.key
        assert record.scan_key == "" or record.scan_key in METRICS
        assert record.source and record.noise and record.rtol >= 0 and record.atol >= 0
    assert {(k.framework, k.source) for k in LOGGED_KEYS} == {(r.framework, r.key) for r in TRAINER_KEYS.values()
                                                               if r.scan_key}
    assert NOT_MAPPED is NO_COUNTERPART
    issue_keys = {("TRL", k) for k in ("frac_reward_zero_std", "reward", "reward_std", "entropy", "kl",
                                       "completions/clipped_ratio", "completions/mean_length",
                                       "completions/mean_terminated_length", "num_tokens")}
    issue_keys |= {("verl", k) for k in ("critic/score/mean", "critic/advantages/mean", "critic/advantages/max",
                                         "critic/advantages/min", "response_length/mean", "response_length/clip_ratio",
                                         "actor/entropy")}
    assert issue_keys <= set(TRAINER_KEYS)
    with pytest.raises(KeyError, match="expected one of"):
        trainer_key("verl", "actor/pg_clipfrac")  # listed without a counterpart, with why
    assert "actor/pg_clipfrac, actor/ppo_kl" in NO_COUNTERPART
