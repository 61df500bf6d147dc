"""TRL's GRPOTrainer (a real one, tiny model, CPU): metrics every step, breaches fail train(), TRL's zero-std count."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")
pytestmark = pytest.mark.slow  # real trainers: about a minute and a half on 2 cores

from trl.trainer.utils import nanstd  # noqa: E402

from grpo_monitor import InvariantViolation, MonitorConfig  # noqa: E402
from grpo_monitor.estimators import ESTIMATORS  # noqa: E402
from grpo_monitor.integrations import trl as gtrl  # noqa: E402
from grpo_monitor.sinks import JSONLSink, read_jsonl  # noqa: E402
from tiny_trl import char_fraction_reward, make_trainer  # noqa: E402


def _train_logs(trainer) -> dict[int, dict]:
    """TRL's own logged values per global step (logging_steps=1)."""
    return {row["step"]: row for row in trainer.state.log_history if "reward" in row}


@pytest.mark.parametrize(
    "how, scale_rewards, convention",
    [
        pytest.param("attach", "group", "trl.group", id="attach-group-bessel"),
        pytest.param("callback", "batch", "trl.batch", id="callback-batch"),
        pytest.param("attach", "none", "trl.none", id="attach-none"),
    ],
)
def test_healthy_run_logs_grpo_metrics_every_step(how, scale_rewards, convention, tiny_model_path, tmp_path):
    """Every optimizer step writes the grpo/ metrics; they agree with TRL's own logged reward and k3 KL."""
    sink = JSONLSink(tmp_path / "grpo.jsonl")
    if how == "attach":
        trainer = make_trainer(tiny_model_path, tmp_path / "out", scale_rewards=scale_rewards, max_steps=2)
        monitor = gtrl.attach(trainer, sinks=[sink])
    else:
        callback = gtrl.GRPOMonitorCallback(sinks=[sink])
        trainer = make_trainer(tiny_model_path, tmp_path / "out", scale_rewards=scale_rewards, max_steps=2,
                               callbacks=[callback])
    trainer.train()
    if how == "callback":
        monitor = callback.monitor
    assert monitor.config.std_convention == convention and monitor.config.group_size == 4
    records = read_jsonl(tmp_path / "grpo.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    trl_logs = _train_logs(trainer)
    for rec in records:
        m, trl = rec["metrics"], trl_logs[rec["step"]]
        assert rec["violations"] == [] and m["grpo/invariants/violations"] == 0
        assert m["grpo/groups/total"] == 2  # 8 completions / num_generations 4
        if m["grpo/groups/effective_prompts"] > 0:
            assert m["grpo/adv/convention_id"] == ESTIMATORS[convention].id
        assert m["grpo/reward/mean"] == pytest.approx(trl["reward"], rel=1e-5)
        assert m["grpo/kl/k3_mean"] == pytest.approx(trl["kl"], rel=1e-3, abs=1e-7)
        assert m["grpo/tokens/adv_row_spread_max"] == 0.0
        assert m["grpo/trl/frac_reward_zero_std"] == pytest.approx(trl["frac_reward_zero_std"])


def test_unscorable_rows_reach_the_monitor(tiny_model_path, tmp_path):
    """Completions holding '?' get None from both reward functions: NaN rows with advantage 0, no breach."""
    trainer = make_trainer(tiny_model_path, tmp_path / "out", max_steps=4, seed=3)
    monitor = gtrl.attach(trainer, sinks=None)
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, gtrl.GRPOMonitorCallback))
    trainer.train()
    unscorable = sum(r.metrics["grpo/rows/unscorable"] for r in callback.reports)
    assert unscorable > 0, "the seed should produce a completion with '?'"
    assert monitor.violation_counts == {}


class ShiftedAdvantages:
    """Adds 0.3 to every advantage: the group means are no longer zero."""

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        out["advantages"] = out["advantages"] + 0.3
        return out


class PopulationStd:
    """Rescales TRL's Bessel z-scores to population ones: not the declared convention."""

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        g = self.num_generations
        out["advantages"] = out["advantages"] * math.sqrt(g / (g - 1))
        return out


@pytest.mark.parametrize(
    "mixin, invariant",
    [pytest.param(ShiftedAdvantages, "zero_group_mean", id="shifted"),
     pytest.param(PopulationStd, "convention", id="population-std")],
)
def test_subclass_that_breaks_advantages_fails_train(mixin, invariant, tiny_model_path, tmp_path):
    """A GRPOTrainer subclass overriding _generate_and_score_completions is observed; train() raises."""
    from trl import GRPOTrainer

    broken = type(f"Broken{mixin.__name__}", (mixin, GRPOTrainer), {})
    trainer = make_trainer(tiny_model_path, tmp_path / "out", trainer_cls=broken, max_steps=2,
                           prompts=("spell a", "say bb"))
    gtrl.attach(trainer, config=MonitorConfig(repro_dir=str(tmp_path / "repro")), sinks=None)
    with pytest.raises(InvariantViolation) as info:
        trainer.train()
    assert invariant in {v.invariant for v in info.value.violations}
    assert trainer.state.global_step == 0, "the breach stops the first step before the optimizer runs"


def test_trl_frac_reward_zero_std_misses_non_dyadic_constant_groups():
    """Reference: eight float32 rewards of 0.7 have TRL nanstd ~6e-8 > atol 1e-8, so isclose(std, 0) is False."""
    std = nanstd(torch.full((1, 8), 0.7, dtype=torch.float32), dim=1)
    assert 1e-8 < float(std) < 1e-7
    assert not bool(torch.isclose(std, torch.zeros_like(std)))


@pytest.mark.parametrize(
    "scale_rewards, trl_counts",
    [pytest.param("group", "the dyadic groups only", id="group"),
     pytest.param("batch", "nothing (batch std)", id="batch")],
)
def test_frac_reward_zero_std_gap(scale_rewards, trl_counts, tiny_model_path, tmp_path):
    """With a constant group of eight 0.7 rewards every step, TRL's frac_reward_zero_std is short by >= 1/2."""
    trainer = make_trainer(
        tiny_model_path, tmp_path / "out", reward_funcs=[char_fraction_reward()], prompts=("const", "spell a"),
        dataset_size=2, num_generations=8, per_device_train_batch_size=16, scale_rewards=scale_rewards, max_steps=2,
    )
    gtrl.attach(trainer, sinks=None)
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, gtrl.GRPOMonitorCallback))
    trainer.train()
    trl_logs = _train_logs(trainer)
    for report in callback.reports:
        m = report.metrics
        assert m["grpo/groups/degenerate_rate"] >= 0.5  # the "const" group, exactly
        assert m["grpo/trl/frac_reward_zero_std"] == pytest.approx(trl_logs[report.step]["frac_reward_zero_std"])
        gap = m["grpo/trl/frac_reward_zero_std_gap"]
        assert gap == pytest.approx(m["grpo/groups/degenerate_rate"] - m["grpo/trl/frac_reward_zero_std"])
        assert gap >= 0.5, f"TRL counts {trl_counts}"
        if scale_rewards == "batch":
            assert m["grpo/trl/frac_reward_zero_std"] == 0.0


def test_config_fields_come_from_the_trainer_and_conflicts_are_worded(tiny_model_path, tmp_path):
    """Unset fields are read from the trainer; a group_size that disagrees with num_generations is refused."""
    trainer = make_trainer(tiny_model_path, tmp_path / "out", epsilon=0.1, epsilon_high=0.28)
    cfg = gtrl.config_from_trainer(trainer, MonitorConfig(on_violation="warn", tolerances={"zero_group_mean": 1e-2}))
    assert (cfg.group_size, cfg.std_convention, cfg.stabilizer) == (4, "trl.group", None)
    assert cfg.clip_range == (0.1, 0.28) and cfg.kl_clamp is None and cfg.rollout_scope == "global"
    assert cfg.on_violation == "warn" and cfg.tolerances.zero_group_mean == 1e-2
    with pytest.raises(ValueError, match=r"config.group_size=8 but the trainer needs 4"):
        gtrl.config_from_trainer(trainer, MonitorConfig(group_size=8))


def test_detach_restores_the_trainer(tiny_model_path, tmp_path):
    """attach() then detach() leaves no wrapper on the instance and no monitor callback; attaching twice is refused."""
    trainer = make_trainer(tiny_model_path, tmp_path / "out")
    before = {name: trainer.__dict__.get(name) for name in gtrl.HOOKED_METHODS}
    gtrl.attach(trainer, sinks=None)
    assert all(name in trainer.__dict__ for name in gtrl.HOOKED_METHODS)
    with pytest.raises(RuntimeError, match="already monitored"):
        gtrl.attach(trainer, sinks=None)
    gtrl.detach(trainer)
    assert {name: trainer.__dict__.get(name) for name in gtrl.HOOKED_METHODS} == before
    assert not any(isinstance(c, gtrl.GRPOMonitorCallback) for c in trainer.callback_handler.callbacks)


def test_logs_into_the_trainers_wandb_run(tiny_model_path, wandb_dir):
    """report_to="wandb": grpo/ rows and TRL's own train/ rows land in ONE offline run, the trainer's."""
    import wandb

    from grpo_monitor.sinks.wandb_reader import history_rows, wait_for_exit

    trainer = make_trainer(tiny_model_path, wandb_dir / "out", report_to="wandb", max_steps=2, run_name="trl-test")
    gtrl.attach(trainer)  # sinks="auto": a WandbSink attached to the trainer's run
    trainer.train()
    wandb.finish()
    (run_file,) = wandb_dir.glob("wandb/offline-run-*/run-*.wandb")
    rows = history_rows(wait_for_exit(run_file))  # the offline file is written after finish() returns
    assert sum("grpo/groups/degenerate_rate" in r for r in rows) == 2
    assert any("train/reward" in r for r in rows)


def test_two_processes_through_accelerate(tiny_model_path, tmp_path):
    """2 CPU processes (gloo): every rank observes the gathered rollout; a breach on rank 1 stops both ranks."""
    from dist_helpers import run_ranks

    worker = Path(__file__).with_name("trl_dist_worker.py")
    healthy = run_ranks("healthy", tmp_path / "healthy", timeout=240, worker=worker, args=(tiny_model_path,))
    for res in healthy:
        assert res["world"] == 2 and res["raised"] is None and len(res["metrics"]) == 2
    assert healthy[0]["metrics"] == healthy[1]["metrics"], "every rank reports the union"
    trl_rows = [row for row in healthy[0]["log_history"] if "reward" in row]
    for m, trl in zip(healthy[0]["metrics"], trl_rows, strict=True):
        assert m["grpo/groups/total"] == 2 and m["grpo/reward/mean"] == pytest.approx(trl["reward"], rel=1e-5)
        assert m["grpo/tokens/valid"] == pytest.approx(trl["completions/mean_length"] * 8)  # both ranks' tokens
    assert (tmp_path / "healthy" / "rank0.jsonl").exists() and not (tmp_path / "healthy" / "rank1.jsonl").exists()
    broken = run_ranks("broken", tmp_path / "broken", timeout=240, worker=worker, args=(tiny_model_path,))
    assert [res["raised"] for res in broken] == [["zero_group_mean"], ["zero_group_mean"]]


# ---------------------------------------------------- the shipped default configuration
#: GRPOConfig fields a CPU test must set (where to write, how long, how many tokens, batch size); every algorithmic
#: field (beta, scale_rewards, loss_type, num_generations, epsilon, multi_objective_aggregation) keeps TRL's default.
RUN_ONLY = dict(use_cpu=True, per_device_train_batch_size=16, max_completion_length=8, max_steps=2, logging_steps=1,
                save_strategy="no", report_to="none", seed=0, disable_tqdm=True, dataloader_num_workers=0)


def _default_trainer(model_path: str, out: Path, trainer_cls=None):
    from trl import GRPOConfig, GRPOTrainer

    from tiny_trl import space_reward, tiny_dataset

    args = GRPOConfig(output_dir=str(out), **RUN_ONLY)
    return (trainer_cls or GRPOTrainer)(model=model_path, reward_funcs=[char_fraction_reward(), space_reward],
                                        args=args, train_dataset=tiny_dataset(32))


def test_shipped_default_config_gets_its_advantages_checked(tiny_model_path, tmp_path):
    """GRPOConfig's own defaults (trl/trainer/grpo_config.py: beta 0, scale_rewards 'group', 8 generations, two reward
    functions summed then normalised): every step's advantages are checked against trl.group (not skipped), quietly."""
    import dataclasses

    from trl import GRPOConfig

    shipped = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    assert (shipped["beta"], shipped["scale_rewards"], shipped["num_generations"]) == (0.0, "group", 8)
    trainer = _default_trainer(tiny_model_path, tmp_path / "out")
    monitor = gtrl.attach(trainer, sinks=[JSONLSink(tmp_path / "grpo.jsonl")])
    trainer.train()
    records = read_jsonl(tmp_path / "grpo.jsonl")
    assert monitor.config.std_convention == "trl.group" and monitor.config.group_size == 8
    assert [r["step"] for r in records] == [1, 2] and all(r["violations"] == [] for r in records)
    checked = [r for r in records if r["metrics"]["grpo/groups/effective_prompts"] > 0]
    assert checked, "the seed should give a group with reward variation"
    assert all(r["metrics"]["grpo/adv/convention_id"] == ESTIMATORS["trl.group"].id for r in checked)


def test_a_defect_under_the_shipped_default_still_raises(tiny_model_path, tmp_path):
    """Under GRPOConfig's defaults a subclass rescaling TRL's Bessel z-scores to population ones fails train()."""
    from trl import GRPOTrainer

    class PopulationStd8(PopulationStd, GRPOTrainer):
        pass

    trainer = _default_trainer(tiny_model_path, tmp_path / "out", PopulationStd8)
    gtrl.attach(trainer, config=MonitorConfig(repro_dir=str(tmp_path / "repro")), sinks=None)
    with pytest.raises(InvariantViolation) as info:
        trainer.train()
    assert "convention" in {v.invariant for v in info.value.violations}
    assert trainer.state.global_step == 0
