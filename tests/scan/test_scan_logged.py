"""A scan reports the sampler-side metrics the trainer logged, under the monitor's keys, from real recordings.

verl: the metrics come from verl's own ``compute_rollout_corr_metrics_from_logprobs`` and are
written by verl's own ``Tracking`` (its ``file`` JSONL logger and its TensorBoard logger).
TRL: the keys TRL's GRPOTrainer logs, written through transformers' own ``WandbCallback``
(an offline W&B run) and ``TensorBoardCallback``. Every mapped value is checked against a
float64 numpy computation from the same token tensors (Delta = trainer − sampler).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from grpo_monitor.sinks import read_jsonl
from grpo_monitor.tools.scan import scan_rollouts
from grpo_monitor.tools.scan.logged import LOGGED_KEYS, read_logged

G, STEPS, T = 4, 5, 10


def token_batches(seed: int = 0):
    """Per step: trainer (old) and sampler log-probs (B, T), the response mask, lengths and entropies."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for step in range(STEPS):
        old = -torch.rand(8, T, generator=g, dtype=torch.float64) * 3
        sampler = old - (0.02 + 0.05 * step) * torch.randn(8, T, generator=g, dtype=torch.float64)
        lengths = torch.randint(3, T + 1, (8,), generator=g)
        mask = (torch.arange(T)[None] < lengths[:, None]).to(torch.float64)
        entropy = torch.rand(8, T, generator=g, dtype=torch.float64)
        out.append((old, sampler, mask, lengths, entropy))
    return out


def reference(old, sampler, mask, lengths, entropy) -> dict[str, float]:
    """The monitor's definitions in float64 numpy, over the valid tokens."""
    m = mask.numpy() > 0
    d = (old.numpy() - sampler.numpy())[m]
    return {"grpo/mismatch/k1_mean": float(np.mean(-d)), "grpo/mismatch/k3_mean": float(np.mean(np.expm1(d) - d)),
            "grpo/mismatch/abs_diff_mean": float(np.mean(np.abs(d))),
            "grpo/mismatch/abs_diff_max": float(np.max(np.abs(d))),
            "grpo/entropy/mean": float(np.mean(entropy.numpy()[m])),
            "grpo/rows/truncated_rate": float(np.mean(lengths.numpy() == T))}


def write_rollouts(path):
    """A generic JSONL rollout record: step, prompt, reward (G rows per prompt)."""
    rng = np.random.default_rng(0)
    with open(path, "w") as f:
        for step in range(1, STEPS + 1):
            for q in range(3):
                for _ in range(G):
                    f.write(json.dumps({"step": step, "prompt": f"q{q}", "reward": float(rng.random() < 0.5)}) + "\n")
    return path


def scanned(tmp_path, metrics) -> dict[int, dict]:
    result = scan_rollouts(write_rollouts(tmp_path / "rollouts.jsonl"), tmp_path / "scan", group_size=G,
                           metrics=metrics, quiet=True, report=False, tensorboard=False)
    assert result.logged_steps == STEPS
    return {r["step"]: r["metrics"] for r in read_jsonl(result.log)}, result


@pytest.fixture
def verl_recordings(tmp_path, monkeypatch):
    """verl's Tracking with its file and TensorBoard backends, fed verl's own rollout_corr metrics."""
    pytest.importorskip("verl")
    pytest.importorskip("tensorboard")
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_corr_metrics_from_logprobs
    from verl.utils.tracking import Tracking

    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "verl_metrics.jsonl"))
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    tracker = Tracking("proj", "exp", default_backend=["file", "tensorboard"])
    refs = {}
    for step, (old, sampler, mask, lengths, entropy) in enumerate(token_batches(), 1):
        metrics = compute_rollout_corr_metrics_from_logprobs(old.float(), sampler.float(), mask.float())
        m = mask > 0
        metrics["actor/entropy"] = float(entropy[m].mean())  # token-mean over one micro-batch
        metrics["response_length/clip_ratio"] = float(torch.eq(lengths, T).float().mean())  # metric_utils' formula
        tracker.log(data=metrics, step=step)
        refs[step] = reference(old, sampler, mask, lengths, entropy)
    tracker.finish()
    return tmp_path / "verl_metrics.jsonl", tmp_path / "tb", refs


VERL_KEYS = ("grpo/mismatch/k1_mean", "grpo/mismatch/k3_mean", "grpo/entropy/mean", "grpo/rows/truncated_rate")


@pytest.mark.parametrize("which", ["file", "tensorboard"])
def test_verl_rollout_corr_metrics_are_reported_as_the_monitors(tmp_path, verl_recordings, which):
    """verl's rollout_corr/kl and k3_kl, actor/entropy, response_length/clip_ratio: grpo/mismatch/k1_mean (same
    sign: rollout − old = −Delta), k3_mean, grpo/entropy/mean, grpo/rows/truncated_rate, at each step."""
    jsonl, tb, refs = verl_recordings
    by_step, result = scanned(tmp_path, jsonl if which == "file" else tb)
    for step, ref in refs.items():
        for key in VERL_KEYS:
            assert by_step[step][key] == pytest.approx(ref[key], rel=2e-5, abs=1e-7), (step, key)
    assert min(abs(r["grpo/mismatch/k1_mean"]) for r in refs.values()) > 1e-3  # large enough to tell the sign
    assert result.logged_keys["rollout_corr/k3_kl"] == "grpo/mismatch/k3_mean"
    assert any("rollout_corr/kl -> grpo/mismatch/k1_mean" in n for n in result.notes)
    high = [s for s, r in refs.items() if r["grpo/mismatch/k3_mean"] > 0.02]
    assert high == [5]  # the sampler noise of token_batches grows with the step
    assert any("above mismatch_k3 = 0.02 nats per token at 1 step: 5" in n for n in result.notes)


def trl_logs(old, sampler, mask, lengths, entropy) -> dict[str, float]:
    """The keys TRL's GRPOTrainer logs for one step, with its formulas (grpo_trainer.py, TRL 1.16)."""
    delta = torch.abs(old - sampler)[mask.bool()]
    return {"sampling/sampling_logp_difference/mean": float(delta.mean()),
            "sampling/sampling_logp_difference/max": float(delta.max()),
            "entropy": float(entropy[mask.bool()].mean()),
            "completions/clipped_ratio": float((lengths == T).float().mean()),
            "sampling/importance_sampling_ratio/mean": 0.99,  # after truncation: not mapped
            "loss": 0.1}


@pytest.fixture
def trl_recordings(tmp_path, monkeypatch):
    """An offline W&B run and TensorBoard events written by transformers' callbacks from TRL's log dicts."""
    wandb = pytest.importorskip("wandb")
    pytest.importorskip("tensorboard")
    from transformers import TrainerControl, TrainerState, TrainingArguments
    from transformers.integrations import TensorBoardCallback, WandbCallback

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))  # where TensorBoardCallback writes
    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[])
    wandb.teardown()
    run = wandb.init(project="trl-logged", mode="offline")
    callbacks = [WandbCallback(), TensorBoardCallback()]
    refs = {}
    try:
        for step, batch in enumerate(token_batches(1), 1):
            state = TrainerState(global_step=step)
            for cb in callbacks:
                cb.on_log(args, state, TrainerControl(), logs=trl_logs(*batch))
            refs[step] = reference(*batch)
        callbacks[1].on_train_end(args, state, TrainerControl())
    finally:
        run.finish()
        wandb.teardown()
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    return run_dir, tmp_path / "tb", refs


TRL_KEYS = ("grpo/mismatch/abs_diff_mean", "grpo/mismatch/abs_diff_max", "grpo/entropy/mean",
            "grpo/rows/truncated_rate")


@pytest.mark.parametrize("which", ["wandb", "tensorboard"])
def test_trl_sampling_metrics_are_reported_as_the_monitors(tmp_path, trl_recordings, which):
    """TRL's train/sampling/sampling_logp_difference/{mean,max}, train/entropy and completions/clipped_ratio,
    read back from the W&B run (at train/global_step) or the events: abs_diff_mean/max, entropy, truncated_rate."""
    run_dir, tb, refs = trl_recordings
    by_step, result = scanned(tmp_path, run_dir if which == "wandb" else tb)
    for step, ref in refs.items():
        for key in TRL_KEYS:
            assert by_step[step][key] == pytest.approx(ref[key], rel=2e-6, abs=1e-9), (step, key)
        assert "grpo/mismatch/ratio_mean" not in by_step[step]  # TRL's truncated ratio is not the token weight
    assert set(result.logged_keys.values()) == set(TRL_KEYS)


def test_mapping_table_names_each_monitor_key_once_per_framework_and_only_catalogued_keys():
    """LOGGED_KEYS: catalogued targets; one source per (framework, key)."""
    from grpo_monitor.catalog.metrics import METRICS

    catalogued = set(METRICS)
    assert {k.key for k in LOGGED_KEYS} <= catalogued
    pairs = [(k.framework, k.key) for k in LOGGED_KEYS]
    assert len(pairs) == len(set(pairs))


def test_a_recording_without_sampler_keys_is_a_note_and_bad_input_is_worded(tmp_path):
    """No mapped key: a note, nothing reported; a JSONL record without a step: an error naming the line."""
    log = tmp_path / "m.jsonl"
    log.write_text(json.dumps({"step": 1, "data": {"critic/score/mean": 1.0}}) + "\n")
    _, result = scanned_or_empty(tmp_path, log)
    assert any("no sampler-side metric" in n for n in result.notes)
    log.write_text('{"step": 1, "data": {}}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"m\.jsonl, line 2: expected a record with a \"step\""):
        read_logged(log)
    with pytest.raises(ValueError, match="no such file"):
        read_logged(tmp_path / "missing")


def scanned_or_empty(tmp_path, metrics):
    result = scan_rollouts(write_rollouts(tmp_path / "rollouts.jsonl"), tmp_path / "scan", group_size=G,
                           metrics=metrics, quiet=True, report=False, tensorboard=False)
    assert result.logged_steps == 0
    assert not any(k.startswith("grpo/mismatch/") for r in read_jsonl(result.log) for k in r["metrics"])
    return None, result


def test_summary_shows_the_logged_families(tmp_path, verl_recordings):
    """format_summary prints the mismatch KL, entropy and truncated rows rows when the recording held them."""
    from grpo_monitor.tools.scan import format_summary

    jsonl, _, refs = verl_recordings
    _, result = scanned(tmp_path, jsonl)
    text = format_summary(result)
    assert "mismatch k3 (nats/token)" in text and "entropy (nats/token)" in text and "truncated rows" in text
    assert not math.isnan(refs[1]["grpo/mismatch/k3_mean"])


def test_cli_metrics_option(tmp_path, verl_recordings, capsys):
    """`grpo-monitor scan ROLLOUTS --metrics verl_metrics.jsonl`: exit 0, the summary shows the mismatch rows; a
    missing recording is exit 2 with the path named."""
    from grpo_monitor.tools.cli import main

    jsonl, _, _ = verl_recordings
    rollouts = write_rollouts(tmp_path / "rollouts.jsonl")
    assert main(["scan", str(rollouts), "-G", str(G), "--metrics", str(jsonl), "--out", str(tmp_path / "o"),
                 "--no-report"]) == 0
    out = capsys.readouterr().out
    assert "mismatch k3 (nats/token)" in out and "rollout_corr/k3_kl -> grpo/mismatch/k3_mean" in out
    assert main(["scan", str(rollouts), "-G", str(G), "--metrics", str(tmp_path / "nope"), "--out",
                 str(tmp_path / "o2"), "--no-report"]) == 2
    assert "nope: no such file" in capsys.readouterr().err


def test_nemo_rl_token_mult_prob_error_from_tensorboard(tmp_path):
    """NeMo-RL's train/token_mult_prob_error (its logger: SummaryWriter.add_scalar("train/<name>", value, step)),
    computed with its formula, is grpo/mismatch/mult_prob_error = mean of exp|Delta| over valid tokens."""
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    refs = {}
    for step, (old, sampler, mask, _, _) in enumerate(token_batches(2), 1):
        lp_error = torch.abs(sampler - old).float()  # generation_logprobs - prev_logprobs
        mult = (torch.exp(lp_error * mask.float()) * mask.float()).sum() / mask.sum()  # masked_mean of NeMo-RL
        writer.add_scalar("train/token_mult_prob_error", float(mult), step)
        m = mask.numpy() > 0
        refs[step] = float(np.mean(np.exp(np.abs(old.numpy() - sampler.numpy())[m])))
    writer.close()
    by_step, result = scanned(tmp_path, tmp_path / "tb")
    for step, ref in refs.items():
        assert by_step[step]["grpo/mismatch/mult_prob_error"] == pytest.approx(ref, rel=1e-6), step
    assert result.logged_keys == {"train/token_mult_prob_error": "grpo/mismatch/mult_prob_error"}
