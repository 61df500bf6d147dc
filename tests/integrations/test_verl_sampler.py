"""verl: a real DataProto's tensors map onto observe_loss / observe_rollout (dataproto_token_inputs)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from sampler_references import mismatch_reference

verl = pytest.importorskip("verl")
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.metric_utils import compute_data_metrics  # noqa: E402

from grpo_monitor.integrations.verl import dataproto_token_inputs  # noqa: E402


def driver_batch(n: int = 8, prompt: int = 3, T: int = 6, seed: int = 0, entropys: bool = True) -> DataProto:
    """What verl's driver holds before update_actor: responses, masks, rollout/old/ref log-probs, rewards."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (n,), generator=g)
    lengths[:3] = T  # rows cut at max_response_length
    response_mask = (torch.arange(T)[None] < lengths[:, None]).long()
    attention = torch.cat([torch.ones(n, prompt, dtype=torch.long), response_mask], 1)
    rollout = -torch.rand(n, T, generator=g)
    old = rollout + 0.01 * torch.randn(n, T, generator=g)
    scores = torch.zeros(n, T)
    scores[torch.arange(n), lengths - 1] = (torch.rand(n, generator=g) < 0.5).float()
    tensors = {"responses": torch.randint(0, 50, (n, T), generator=g), "prompts": torch.zeros(n, prompt).long(),
               "attention_mask": attention, "response_mask": response_mask, "rollout_log_probs": rollout,
               "old_log_probs": old, "ref_log_prob": old + 0.05, "token_level_rewards": scores,
               "token_level_scores": scores, "advantages": torch.zeros(n, T), "returns": torch.zeros(n, T)}
    if entropys:
        tensors["entropys"] = torch.rand(n, T, generator=g)
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": np.repeat(np.arange(n // 4), 4)})


def test_a_real_dataproto_feeds_the_sampler_keys():
    """Every mapped tensor reaches the monitor; the keys equal the float64 reference over the batch."""
    data = driver_batch()
    args = dataproto_token_inputs(data)
    assert set(args["loss"]) == {"mask", "sampler_logprobs", "old_logprobs", "ref_logprobs", "entropy"}
    mon = GRPOMonitor(MonitorConfig(group_size=4, strict=True))
    rewards = data.batch["token_level_rewards"].sum(-1).reshape(-1, 4)
    mon.observe_rollout(rewards, **{k: v.reshape(-1, 4) for k, v in args["rollout"].items()})
    mon.observe_loss(**args["loss"])
    m = mon.end_step().metrics
    b = {k: v.double().numpy() for k, v in data.batch.items()}
    want = mismatch_reference(b["response_mask"], b["rollout_log_probs"], old=b["old_log_probs"], entropy=b["entropys"])
    for key, value in want.items():
        assert m[key] == pytest.approx(value, rel=1e-5), key


def test_truncation_is_verls_own_clip_ratio():
    """grpo/rows/truncated_rate equals verl's response_length/clip_ratio on the same batch."""
    data = driver_batch(entropys=False)
    args = dataproto_token_inputs(data)
    assert "entropy" not in args["loss"]
    mon = GRPOMonitor(MonitorConfig(group_size=4, strict=True))
    mon.observe_rollout(data.batch["token_level_rewards"].sum(-1), group_ids=torch.arange(8) // 4, **args["rollout"])
    verl_ratio = compute_data_metrics(data, use_critic=False)["response_length/clip_ratio"]
    assert mon.end_step().metrics["grpo/rows/truncated_rate"] == pytest.approx(verl_ratio)


def test_without_a_mask_the_error_is_worded():
    """A DataProto without responses or masks is refused with the missing key named."""
    with pytest.raises(ValueError, match="responses"):
        dataproto_token_inputs(DataProto.from_dict({"old_log_probs": torch.zeros(2, 3)}))


def test_the_helpers_example_runs():
    """dataproto_token_inputs's docstring example runs as written (on a real DataProto)."""
    import doctest

    from grpo_monitor.integrations import verl as grpo_verl

    finder = doctest.DocTestFinder()
    tests = [t for t in finder.find(grpo_verl) if t.name.endswith("dataproto_token_inputs")]
    runner = doctest.DocTestRunner()
    for t in tests:
        runner.run(t)
    assert tests and runner.failures == 0
