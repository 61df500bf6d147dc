"""A real TRL GRPOTrainer, as users configure it: healthy runs finish (float32 residue is a warning), TRL's
own metric definitions are matched, and a breach names TRL's step and the prompt."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

pytest.importorskip("trl")

from grpo_monitor import InvariantViolation, MonitorConfig  # noqa: E402
from grpo_monitor.integrations import trl as gtrl  # noqa: E402
from tiny_trl import make_trainer  # noqa: E402

PROMPTS = ("const", "spell a")


def scaled_reward(constant: float):
    """A reward on a 10-100 scale; the "const" prompt always scores ``constant``."""

    def reward(prompts, completions, **_):
        return [constant if p == "const" else 10.0 + 90.0 * (c.count("a") / len(c) if c else 0.0)
                for p, c in zip(prompts, completions, strict=True)]

    reward.__name__ = "scaled"
    return reward


def trl_residue(constant: float, G: int) -> float:
    """What TRL's float32 arithmetic gives a group of G equal rewards (independent of the monitor)."""
    r = torch.full((G,), constant, dtype=torch.float32)
    return float(((r - r.mean()) / (r.std() + 1e-4)).abs().max())


@pytest.mark.slow
@pytest.mark.parametrize("G", [8, 16])
@pytest.mark.parametrize("constant", [12.3, 87.3])
def test_stock_trl_with_a_constant_prompt_finishes_with_a_warning(constant, G, tiny_model_path, tmp_path):
    """scale_rewards="group" (Bessel + 1e-4, float32), a prompt always scoring 12.3 or 87.3: train() finishes;
    TRL's one-ulp mean gives that group |advantage| ~0.0094 / 0.07, reported as a float32-residue warning."""
    assert trl_residue(constant, G) > 0.009  # the hazard is real for these values
    trainer = make_trainer(tiny_model_path, tmp_path / "out", reward_funcs=[scaled_reward(constant)],
                           num_generations=G, per_device_train_batch_size=2 * G, max_steps=2, prompts=PROMPTS,
                           max_completion_length=4)
    monitor = gtrl.attach(trainer, config=MonitorConfig(repro_dir=str(tmp_path / "repro")), sinks=None)
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, gtrl.GRPOMonitorCallback))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    assert trainer.state.global_step == 2 and monitor.config.std_convention == "trl.group"
    found = [v for r in callback.reports for v in r.violations if v.invariant != "trainer_metric"]
    assert all(v.severity == "warning" and v.invariant == "degenerate_zero" for v in found), found
    dashboard = [v for r in callback.reports for v in r.violations if v.invariant == "trainer_metric"]
    assert all(v.severity == "warning" and "frac_reward_zero_std" in v.observed for v in dashboard), dashboard
    assert found and "float32 residue" in found[0].hint and found[0].groups == ("const",)
    assert any("float32 residue" in str(w.message) for w in caught)


@pytest.mark.slow
def test_normalize_then_sum_reports_the_reward_trl_logs(tiny_model_path, tmp_path):
    """Under multi_objective_aggregation="normalize_then_sum" grpo/reward/mean equals TRL's logged reward."""
    from tiny_trl import char_fraction_reward, space_reward

    trainer = make_trainer(tiny_model_path, tmp_path / "out", reward_funcs=[char_fraction_reward(), space_reward],
                           multi_objective_aggregation="normalize_then_sum", max_steps=2)
    monitor = gtrl.attach(trainer, sinks=None)
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, gtrl.GRPOMonitorCallback))
    trainer.train()
    assert monitor.config.std_convention == "trl.normalize_then_sum"
    logs = {row["step"]: row for row in trainer.state.log_history if "reward" in row}
    for report in callback.reports:
        assert not [v for v in report.violations if v.severity == "error"]
        assert report.metrics["grpo/reward/mean"] == pytest.approx(logs[report.step]["reward"], rel=1e-5)


@pytest.mark.slow
def test_region_clip_fractions_match_trls_log(tiny_model_path, tmp_path):
    """grpo/trl/clip_ratio_{low,high,region} equal TRL's clip_ratio/*_mean with several inner iterations."""
    trainer = make_trainer(tiny_model_path, tmp_path / "out", num_iterations=2, max_steps=3, learning_rate=0.05,
                           epsilon=0.01)
    gtrl.attach(trainer, sinks=None)
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, gtrl.GRPOMonitorCallback))
    trainer.train()
    logs = {row["step"]: row for row in trainer.state.log_history if "clip_ratio/region_mean" in row}
    compared = 0
    for report in callback.reports:
        trl = logs.get(report.step)
        if trl is None or "grpo/trl/clip_ratio_region" not in report.metrics:
            continue
        for side in ("low", "high", "region"):
            assert report.metrics[f"grpo/trl/clip_ratio_{side}"] == pytest.approx(trl[f"clip_ratio/{side}_mean"],
                                                                               abs=1e-6)
        compared += 1
    assert compared >= 1


def test_cispo_clip_bound_is_epsilon_high_itself(tiny_model_path, tmp_path):
    """loss_type="cispo" clips the ratio at epsilon_high (e.g. 5), not 1 + epsilon_high: clip_range (1, eh - 1)."""
    trainer = make_trainer(tiny_model_path, tmp_path / "out", loss_type="cispo", epsilon_high=5.0)
    cfg = gtrl.config_from_trainer(trainer)
    assert cfg.clip_range == (1.0, 4.0) and math.isclose(1 + cfg.clip_range[1], 5.0)


class ShiftedAtSecondStep:
    """Adds 0.3 to every advantage from TRL's second optimizer step on."""

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        if self.state.global_step >= 1:
            out["advantages"] = out["advantages"] + 0.3
        return out


@pytest.mark.slow
def test_a_breach_names_trls_step_and_the_prompt(tiny_model_path, tmp_path):
    """The breach raised during TRL's step 2 says "step 2" (TRL's numbering) and names the prompt text."""
    from trl import GRPOTrainer

    broken = type("Broken", (ShiftedAtSecondStep, GRPOTrainer), {})
    trainer = make_trainer(tiny_model_path, tmp_path / "out", trainer_cls=broken, max_steps=3,
                           prompts=("spell a", "say bb"))
    gtrl.attach(trainer, config=MonitorConfig(repro_dir=str(tmp_path / "repro")), sinks=None)
    with pytest.raises(InvariantViolation) as info:
        trainer.train()
    v = next(v for v in info.value.violations if v.invariant == "zero_group_mean")
    assert v.step == 2 and trainer.state.global_step == 1
    assert set(v.groups) <= {"spell a", "say bb"} and v.groups


def _my_estimator_trainer(variant: str):
    """A GRPOTrainer whose advantages are the user's own estimator (tests/integrations/framework_cases/
    my_estimator.py) on TRL's summed rewards, healthy or with one bug."""
    import sys
    from pathlib import Path

    import numpy as np
    from trl import GRPOTrainer

    sys.path.insert(0, str(Path(__file__).resolve().parent / "framework_cases"))
    import my_estimator as mine

    class Mine(GRPOTrainer):
        def _calculate_rewards(self, *args, **kwargs):
            self._my_rewards = out = super()._calculate_rewards(*args, **kwargs)
            return out

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            g = int(self.num_generations)
            scores = gtrl.trl_rewards(self._my_rewards, self.reward_weights, g, "sum_then_normalize")
            uid = np.arange(len(scores)) // g
            width = g // 2 if variant == "wrong_slice" else g  # TRL's rows are contiguous: slice them wrongly
            row = "healthy" if variant == "wrong_slice" else variant
            adv = mine.rows(scores.double(), uid, row, width) if variant != "wrong_slice" else \
                mine.reference(scores.double().reshape(-1, width)).reshape(-1)
            out["advantages"] = adv.to(out["advantages"].dtype)
            return out

    return Mine, mine


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["healthy", "misaligned", "wrong_slice", "swapped_branch"])
def test_your_own_estimator_is_the_reference_in_trl(variant, tiny_model_path, tmp_path):
    """attach(trainer, config=MonitorConfig(std_convention=fn)): the user's estimator in a real GRPOTrainer is
    quiet; misaligned rows, a wrong group slice or a swapped branch of it stop train()."""
    cls, mine = _my_estimator_trainer(variant)
    trainer = make_trainer(tiny_model_path, tmp_path / "out", trainer_cls=cls, max_steps=1,
                           prompts=("spell a", "say bb"))
    monitor = gtrl.attach(trainer, config=MonitorConfig(std_convention=mine.reference,
                                                        repro_dir=str(tmp_path / "repro")), sinks=None)
    assert monitor.config.std_convention == "custom.my_estimator.reference"
    if variant == "healthy":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.train()
        callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, gtrl.GRPOMonitorCallback))
        assert trainer.state.global_step == 1
        assert [v for r in callback.reports for v in r.violations if v.severity == "error"] == []
        return
    with pytest.raises(InvariantViolation) as info:
        trainer.train()
    assert {v.invariant for v in info.value.violations} & {"convention", "affine_in_rewards", "zero_group_mean"}
