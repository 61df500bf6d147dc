"""TRL feeds the sampler's side from its own tensors: sampling_per_token_logps, entropies, truncation.

vLLM does not run here, so a GRPOTrainer subclass puts ``sampling_per_token_logps`` into
the batch the way TRL does under ``vllm_importance_sampling_correction`` (the trainer's old
log-probs plus bf16-sized noise, NaN where the engine could not score a token).
"""

from __future__ import annotations

import math

import pytest
import torch

from grpo_monitor import MonitorConfig
from grpo_monitor.integrations import trl as trl_integration
from grpo_monitor.sinks import JSONLSink, read_jsonl

pytestmark = pytest.mark.slow  # a real trainer: about half a minute on 2 cores

from tiny_trl import make_trainer  # noqa: E402


def sampler_trainer(shift: float = 0.0):
    from trl import GRPOTrainer

    class WithSampler(GRPOTrainer):
        """Adds sampling_per_token_logps = old log-probs + noise (+ shift), as vLLM's would be."""

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            old = out.get("old_per_token_logps")
            if old is None:  # TRL computes them only when it needs them; the test needs them always
                raise AssertionError("set steps_per_generation > gradient_accumulation_steps")
            g = torch.Generator().manual_seed(int(old.numel()))
            sampler = old + 0.003 * torch.randn(old.shape, generator=g) + shift
            sampler[0, 0] = math.nan  # a token the engine could not score
            out["sampling_per_token_logps"] = sampler
            return out

    return WithSampler


def run(tmp_path, model_path, shift: float = 0.0) -> tuple[list[dict], object]:
    trainer = make_trainer(model_path, tmp_path / "out", trainer_cls=sampler_trainer(shift), max_steps=2,
                           gradient_accumulation_steps=1, steps_per_generation=2, max_completion_length=6)
    trl_integration.attach(trainer, config=MonitorConfig(on_violation="warn"), sinks=[JSONLSink(tmp_path / "m.jsonl")])
    trainer.train()
    return read_jsonl(tmp_path / "m.jsonl"), trainer


def test_a_real_run_logs_mismatch_entropy_and_truncation(tiny_model_path, tmp_path):
    """The one-line attach logs grpo/mismatch/*, grpo/entropy/* and truncation from TRL's own tensors, agreeing
    with TRL's logged entropy and clipped ratio; bf16-sized noise is no violation."""
    records, trainer = run(tmp_path, tiny_model_path)
    logs = {h["step"]: h for h in trainer.state.log_history if "loss" in h}
    for rec in records:
        m = rec["metrics"]
        for key in ("grpo/mismatch/k3_mean", "grpo/mismatch/ratio_mean", "grpo/mismatch/abs_diff_p99",
                    "grpo/entropy/mean", "grpo/entropy/sampled_nll_mean"):
            assert key in m, key
        assert 0 <= m["grpo/mismatch/k3_mean"] < 1e-3 and rec["violations"] == []
        assert m["grpo/entropy/mean"] == pytest.approx(logs[rec["step"]]["entropy"], rel=1e-4)
        if "grpo/rows/truncated_rate" in m:
            assert m["grpo/rows/truncated_rate"] == pytest.approx(logs[rec["step"]]["completions/clipped_ratio"])
    assert any("grpo/rows/truncated_rate" in r["metrics"] for r in records)


def test_a_shifted_sampler_is_a_mismatch_error(tiny_model_path, tmp_path):
    """Sampler log-probs 0.5 nat off every token (another model's): the mismatch error, reported by TRL's step."""
    records, _ = run(tmp_path, tiny_model_path, shift=0.5)
    assert any(v["invariant"] == "mismatch" and v["severity"] == "error" for r in records for v in r["violations"])
