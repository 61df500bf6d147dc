"""TRL's own logged metrics audited on real GRPOTrainer runs: quiet when right, a trainer_metric warning when off."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("trl")
pytestmark = pytest.mark.slow  # real trainers on the tiny model

from grpo_monitor.integrations import trl as gtrl  # noqa: E402
from tiny_trl import char_fraction_reward, make_trainer  # noqa: E402


def _run(tiny_model_path, tmp_path, **overrides):
    """Train, and return the monitor's reports and TRL's log history."""
    trainer = make_trainer(tiny_model_path, tmp_path / "out", **overrides)
    gtrl.attach(trainer, sinks=None)
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, gtrl.GRPOMonitorCallback))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        trainer.train()
    return list(callback.reports), [row for row in trainer.state.log_history if "reward" in row or "entropy" in row]


def _audited(reports) -> list[dict]:
    return [row for r in reports for row in r.trainer_metrics]


def test_float32_zero_std_is_flagged(tiny_model_path, tmp_path):
    """Eight rewards of 0.7: TRL's float32 std is not 0, its frac_reward_zero_std misses the constant group."""
    reports, logs = _run(tiny_model_path, tmp_path, reward_funcs=[char_fraction_reward()], prompts=("const", "spell a"),
                         dataset_size=2, num_generations=8, per_device_train_batch_size=16, max_steps=2)
    found = [v for r in reports for v in r.violations if v.invariant == "trainer_metric"]
    flagged = [v for v in found if "frac_reward_zero_std" in v.observed]
    assert len(flagged) == 2 and all(v.severity == "warning" for v in flagged)
    for report, log in zip(reports, logs, strict=True):
        row = next(r for r in report.trainer_metrics if r["key"] == "frac_reward_zero_std")
        assert row["trainer"] == pytest.approx(log["frac_reward_zero_std"])  # TRL's logged value, as logged
        assert row["exact"] >= 0.5 and row["cause"] == "float32_zero_std"
        assert report.metrics["grpo/trainer_metrics/mismatched"] >= 1
    text = flagged[0].message()
    assert "float32" in text and f"{row['exact']:.6g}" in text and "frac_reward_zero_std = " in text
    assert {v.observed.split(" = ")[0] for v in found} == {"TRL logged frac_reward_zero_std"}  # nothing else


@pytest.mark.parametrize("accumulation", [1, 2], ids=["no-accumulation", "accumulation-2"])
@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo", "bnpo"])
def test_healthy_runs_are_quiet(loss_type, accumulation, tiny_model_path, tmp_path):
    """Every loss type, with and without gradient accumulation: every audited key agrees, no warning."""
    reports, logs = _run(tiny_model_path, tmp_path, loss_type=loss_type, gradient_accumulation_steps=accumulation,
                         per_device_train_batch_size=4, max_steps=2)
    rows = _audited(reports)
    keys = {r["key"] for r in rows}
    assert {"reward", "reward_std", "frac_reward_zero_std", "completions/mean_length", "completions/clipped_ratio",
            "entropy", "kl", "clip_ratio/region_mean"} <= keys
    assert [r for r in rows if r["cause"]] == []
    assert all(v.invariant != "trainer_metric" for r in reports for v in r.violations)
    gaps = {k: max(abs(r["trainer"] - r["exact"]) for r in rows if r["key"] == k) for k in sorted(keys)}
    print(f"\nnoise {loss_type} accumulation={accumulation}: " + ", ".join(f"{k} {g:.1e}" for k, g in gaps.items()))


def test_uneven_accumulation_window_is_flagged(tiny_model_path, tmp_path):
    """TRL #7047: accumulation 3 over an epoch of 4 micro-batches, two steps per log: windows of 3 and 1."""
    reports, logs = _run(tiny_model_path, tmp_path, gradient_accumulation_steps=3, steps_per_generation=1,
                         per_device_train_batch_size=4, dataset_size=4, num_train_epochs=1, max_steps=-1,
                         logging_steps=2, num_generations=4)
    rows = [r for r in _audited(reports) if r["key"] == "entropy"]
    assert len(rows) == 1
    row = rows[0]
    print(f"\nuneven window: TRL {row['trainer']:.7g}, exact {row['exact']:.7g}")
    assert row["cause"] == "micro_batch_averaging"
    assert row["trainer"] == pytest.approx(logs[-1]["entropy"])


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_off_policy_micro_steps_are_quiet(level, tiny_model_path, tmp_path):
    """steps_per_generation 2: the second micro-step runs after an update (importance weights != 1, TRL's kl with
    its bias correction, clip ratios); every audited key agrees, at token and at sequence level."""
    reports, _ = _run(tiny_model_path, tmp_path, steps_per_generation=2, importance_sampling_level=level,
                      per_device_train_batch_size=4, max_steps=2)
    rows = _audited(reports)
    assert "kl" in {r["key"] for r in rows} and [r for r in rows if r["cause"]] == []
