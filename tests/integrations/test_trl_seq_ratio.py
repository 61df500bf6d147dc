"""A real TRL GRPOTrainer under GSPO (importance_sampling_level="sequence") logs grpo/seq_ratio/* from its tensors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytest.importorskip("trl")
pytestmark = pytest.mark.slow  # a real trainer: about half a minute on 2 cores

from trl import GRPOTrainer  # noqa: E402

from grpo_monitor.integrations import trl as gtrl  # noqa: E402
from grpo_monitor.sinks import JSONLSink, read_jsonl  # noqa: E402
from tiny_trl import make_trainer  # noqa: E402


class RecordingTrainer(GRPOTrainer):
    """GRPOTrainer that keeps, per loss call, the mask, old log-probs and the policy's log-probs TRL's loss reads."""

    def _compute_loss(self, model, inputs):
        self._pending = inputs
        return super()._compute_loss(model, inputs)

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        inputs, self._pending = getattr(self, "_pending", None), None
        if inputs is not None:  # the first call inside a loss: the policy's, the log-probs of TRL's coef_1
            self.seen = [*getattr(self, "seen", []), (inputs["completion_mask"].clone(),
                                                      inputs["old_per_token_logps"].clone(), out[0].detach().clone())]
        return out


def trl_seq_ratio(mask: torch.Tensor, old: torch.Tensor, logps: torch.Tensor, eps: tuple[float, float]) -> dict:
    """TRL's sequence-level coef_1 (its formula, in float64) and the keys over its rows."""
    m, lr = mask.double(), logps.double() - old.double()
    w = torch.exp((lr * m).sum(-1) / m.sum(-1).clamp(min=1.0)).numpy()[m.sum(-1).numpy() > 0]
    return {"mean": w.mean(), "min": w.min(), "max": w.max(), "ess": w.sum() ** 2 / (w.size * (w * w).sum()),
            "clip_frac": np.mean((w < 1 - eps[0]) | (w > 1 + eps[1])),
            "tail_frac": np.mean((w < 0.5) | (w > 2.0))}


def test_gspo_run_logs_the_sequence_ratio_of_its_own_coef(tiny_model_path, tmp_path):
    """Every step's grpo/seq_ratio/* equals TRL's own per-sequence ratio (its formula on the tensors its loss read),
    with the clip range read from epsilon / epsilon_high; TRL's own sign-aware region clip is never above ours."""
    sink = JSONLSink(tmp_path / "grpo.jsonl")
    trainer = make_trainer(tiny_model_path, tmp_path / "out", trainer_cls=RecordingTrainer, max_steps=4,
                           importance_sampling_level="sequence", loss_type="grpo", epsilon=3e-4, epsilon_high=4e-4,
                           num_iterations=2, learning_rate=3e-2)
    monitor = gtrl.attach(trainer, sinks=[sink])
    trainer.train()
    assert monitor.config.clip_range == (3e-4, 4e-4)
    records = read_jsonl(tmp_path / "grpo.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3, 4] and len(trainer.seen) == 4  # one micro-batch per step
    trl_logs = {row["step"]: row for row in trainer.state.log_history if "clip_ratio/region_mean" in row}
    moved = 0
    for rec, seen in zip(records, trainer.seen, strict=True):
        want, got = trl_seq_ratio(*seen, (3e-4, 4e-4)), rec["metrics"]
        for key, value in want.items():
            assert got[f"grpo/seq_ratio/{key}"] == pytest.approx(float(value), rel=1e-5, abs=1e-7), key
        assert trl_logs[rec["step"]]["clip_ratio/region_mean"] <= got["grpo/seq_ratio/clip_frac"] + 1e-9
        moved += want["max"] - want["min"] > 1e-3
    assert moved >= 1  # the second iteration on each batch moves the policy: w spreads away from 1
    assert all(math.isfinite(r["metrics"]["grpo/seq_ratio/ess"]) for r in records)


def test_a_gspo_run_records_its_level_and_its_report_draws_the_sequence_ratio(tiny_model_path, tmp_path):
    """The run record carries TRL's importance_sampling_level, so the report of a GSPO run draws the sequence-ratio
    figure with its clip band (a token-level run's report has none: tests/test_report_async_moe.py)."""
    from grpo_monitor.tools.reporting import build_report

    trainer = make_trainer(tiny_model_path, tmp_path / "out", max_steps=2, importance_sampling_level="sequence",
                           loss_type="grpo", epsilon=3e-4, epsilon_high=4e-4, num_iterations=2, learning_rate=3e-2)
    gtrl.attach(trainer, sinks=[JSONLSink(tmp_path / "grpo.jsonl")])
    trainer.train()
    records = read_jsonl(tmp_path / "grpo.jsonl")
    assert records[0]["run"]["settings"]["importance_sampling_level"] == "sequence"
    build_report(tmp_path)
    assert (tmp_path / "plots" / "seq_ratio.png").is_file()
    assert "clip band [1-0.0003, 1+0.0004]" in (tmp_path / "report.html").read_text()
