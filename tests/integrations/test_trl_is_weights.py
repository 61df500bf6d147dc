"""TRL hands the monitor the importance-sampling correction weights its loss applies (``importance_sampling_ratio``).

vLLM does not run here, so a GRPOTrainer subclass puts ``sampling_per_token_logps`` and
``importance_sampling_ratio`` into the batch as TRL does under ``vllm_importance_sampling_correction``
with ``vllm_importance_sampling_mode="token_truncate"``: exp(old - sampler) on the completion mask,
clamped at ``vllm_importance_sampling_clip_max``. Every weight the subclass made is kept, so the
run's extremes are known exactly.
"""

from __future__ import annotations

import pytest
import torch

from grpo_monitor import MonitorConfig
from grpo_monitor.integrations import trl as trl_integration
from grpo_monitor.sinks import JSONLSink, read_jsonl

pytestmark = pytest.mark.slow  # a real trainer: about half a minute on 2 cores

from tiny_trl import make_trainer  # noqa: E402

CAP = 2.0  # TRL's vllm_importance_sampling_clip_max default


def weighting_trainer(made: list):
    from trl import GRPOTrainer

    class WithWeights(GRPOTrainer):
        """Adds sampler log-probs (old + noise, 1 nat lower on each row's first token) and TRL's token_truncate
        weights."""

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            old, mask = out["old_per_token_logps"], out["completion_mask"]
            g = torch.Generator().manual_seed(int(old.numel()))
            sampler = old + 0.01 * torch.randn(old.shape, generator=g)
            sampler[:, 0] -= 1.0  # exp(1) > CAP: the first token of every row is truncated
            ratio = torch.clamp(torch.exp((old - sampler) * mask), max=CAP)
            out.update(sampling_per_token_logps=sampler, importance_sampling_ratio=ratio)
            made.append(ratio[mask > 0])
            return out

    return WithWeights


def test_a_real_run_logs_the_weights_trl_applies(tiny_model_path, tmp_path):
    """Every step reports grpo/mismatch/is_weight_*: the maximum is TRL's cap exactly, and the run's extremes are those
    of the weights the trainer was given."""
    made: list[torch.Tensor] = []
    trainer = make_trainer(tiny_model_path, tmp_path / "out", trainer_cls=weighting_trainer(made), max_steps=2,
                           gradient_accumulation_steps=1, steps_per_generation=2, max_completion_length=6)
    trl_integration.attach(trainer, config=MonitorConfig(on_violation="warn"), sinks=[JSONLSink(tmp_path / "m.jsonl")])
    trainer.train()
    records = read_jsonl(tmp_path / "m.jsonl")
    weights = torch.cat(made).double()
    steps = [r["metrics"] for r in records if "grpo/mismatch/is_weight_mean" in r["metrics"]]
    assert len(steps) == 2
    for m in steps:
        assert m["grpo/mismatch/is_weight_max"] == CAP
        assert m["grpo/mismatch/is_weight_min"] <= m["grpo/mismatch/is_weight_mean"] < CAP
    assert min(m["grpo/mismatch/is_weight_min"] for m in steps) == pytest.approx(weights.min().item(), rel=1e-6)
