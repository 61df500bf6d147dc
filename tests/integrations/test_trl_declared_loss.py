"""A real TRL trainer: the aggregation is declared only for GRPOTrainer's own loss (TRL's GMPOTrainer replaces it),
and grpo/adv/stabilizer is the catalogue's fitted epsilon under scale_rewards batch and exactly 0 under none."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("trl")

from trl import GRPOTrainer  # noqa: E402

from grpo_monitor import MonitorConfig  # noqa: E402
from grpo_monitor.integrations import trl as gtrl  # noqa: E402
from grpo_monitor.integrations._trl_settings import replaced_loss  # noqa: E402
from tiny_trl import make_trainer  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from trl.experimental.gmpo import GMPOTrainer  # noqa: E402


def has_a(prompts, completions, **_):
    """1 when the completion holds an 'a' (completions differ in length: the tiny model stops at random)."""
    return [float("a" in c) for c in completions]


def _train(model, out, trainer_cls=None, steps: int = 2, **overrides):
    trainer = make_trainer(model, out / "run", trainer_cls=trainer_cls, reward_funcs=[has_a], beta=0.0,
                           max_steps=steps, **overrides)
    monitor = gtrl.attach(trainer, config=MonitorConfig(repro_dir=str(out / "repro")), sinks=None)
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, gtrl.GRPOMonitorCallback))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    return trainer, monitor, list(callback.reports)


class DelegatingGRPO(GRPOTrainer):
    """A subclass that wraps the stock loss (calls super()._compute_loss): still TRL's aggregation."""

    def _compute_loss(self, model, inputs):
        return super()._compute_loss(model, inputs)


def test_which_classes_replace_the_loss():
    """GMPOTrainer's _compute_loss never calls GRPOTrainer's; a delegating override does."""
    assert replaced_loss(GMPOTrainer.__new__(GMPOTrainer)) == "GMPOTrainer._compute_loss"
    assert replaced_loss(DelegatingGRPO.__new__(DelegatingGRPO)) is None
    assert replaced_loss(GRPOTrainer.__new__(GRPOTrainer)) is None


@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
def test_gmpo_trainer_is_not_declared_and_finishes(loss_type, tiny_model_path, tmp_path):
    """TRL's own GMPOTrainer: loss_aggregation 'auto' (fitted, not checked), train() finishes, no breach."""
    trainer, monitor, reports = _train(tiny_model_path, tmp_path, GMPOTrainer, loss_type=loss_type)
    assert monitor.config.loss_aggregation == "auto"
    assert trainer.state.global_step == 2
    assert not [v for r in reports for v in r.violations if v.invariant == "loss_aggregation"]


def test_stock_and_delegating_trainers_stay_declared(tiny_model_path, tmp_path):
    """The same loss_type on GRPOTrainer and on a delegating subclass: declared and quiet."""
    for cls in (GRPOTrainer, DelegatingGRPO):
        trainer, monitor, reports = _train(tiny_model_path, tmp_path / cls.__name__, cls, loss_type="grpo")
        assert monitor.config.loss_aggregation == "trl.grpo"
        assert not [v for r in reports for v in r.violations if v.severity == "error"]


def test_stabilizer_is_the_fitted_epsilon_under_batch(tiny_model_path, tmp_path):
    """scale_rewards='batch': (r - mean_g) / (batch std + 1e-4); the logged stabilizer is 1e-4, not the divisor."""
    _, monitor, reports = _train(tiny_model_path, tmp_path, scale_rewards="batch", steps=3)
    assert monitor.config.std_convention == "trl.batch"
    logged = [r.metrics["grpo/adv/stabilizer"] for r in reports if "grpo/adv/stabilizer" in r.metrics]
    assert logged and all(abs(x - 1e-4) < 2e-6 for x in logged), logged


def test_stabilizer_is_exactly_zero_under_none(tiny_model_path, tmp_path):
    """scale_rewards='none' does not divide: no free stabilizer, so the logged value is exactly 0 (the catalogue),
    not float32 noise around it."""
    _, monitor, reports = _train(tiny_model_path, tmp_path, scale_rewards="none", steps=3)
    assert monitor.config.std_convention == "trl.none"
    logged = [r.metrics["grpo/adv/stabilizer"] for r in reports if "grpo/adv/stabilizer" in r.metrics]
    assert logged and all(x == 0.0 for x in logged), logged
