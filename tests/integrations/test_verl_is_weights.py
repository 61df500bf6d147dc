"""verl: the rollout correction's ``rollout_is_weights``, put in a real DataProto by verl itself, reach the monitor."""

from __future__ import annotations

import pytest

from grpo_monitor import GRPOMonitor, MonitorConfig

verl = pytest.importorskip("verl")
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch  # noqa: E402

from grpo_monitor.integrations.verl import dataproto_token_inputs  # noqa: E402
from test_verl_sampler import driver_batch  # noqa: E402


@pytest.mark.parametrize("threshold", [1.005, "0.995_1.005"], ids=["truncated", "icepop-masked"])
def test_verls_rollout_is_weights_are_the_is_weight_keys(threshold):
    """compute_rollout_correction_and_add_to_batch (token level) puts rollout_is_weights in the batch; the monitor's
    grpo/mismatch/is_weight_mean is verl's rollout_corr/rollout_is_mean, its extremes those of the weights."""
    data = driver_batch(seed=3)
    data, verl_metrics = compute_rollout_correction_and_add_to_batch(
        data, {"rollout_is": "token", "rollout_is_threshold": threshold})
    args = dataproto_token_inputs(data)
    assert "is_weights" in args["loss"]
    mon = GRPOMonitor(MonitorConfig(group_size=4))
    mon.observe_loss(**args["loss"])
    m = mon.end_step().metrics
    w = data.batch["rollout_is_weights"].double()[data.batch["response_mask"] > 0]
    assert m["grpo/mismatch/is_weight_mean"] == pytest.approx(verl_metrics["rollout_corr/rollout_is_mean"], rel=1e-6)
    assert (m["grpo/mismatch/is_weight_min"], m["grpo/mismatch/is_weight_max"]) == (w.min().item(), w.max().item())
    assert m["grpo/mismatch/is_weight_max"] <= 1.005 and (m["grpo/mismatch/is_weight_min"] == 0.0) == (
        threshold != 1.005)
