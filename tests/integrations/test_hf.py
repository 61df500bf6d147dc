"""The Hugging Face Trainer callback and the plain-loop helper: one end_step per optimizer step, breaches, W&B."""

from __future__ import annotations

import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig  # noqa: E402
from grpo_monitor.integrations import hf  # noqa: E402
from grpo_monitor.sinks import JSONLSink, WandbSink, read_jsonl  # noqa: E402
from toy_policy import G, PromptDataset, ToyGRPOTrainerMixin, ToyPolicy, grpo_batch  # noqa: E402


class ToyGRPOTrainer(ToyGRPOTrainerMixin, transformers.Trainer):
    pass


def make_trainer(tmp_path, *, steps: int = 3, accumulation: int = 2, report_to="none", break_at_step=None):
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), use_cpu=True, per_device_train_batch_size=2, max_steps=steps,
        gradient_accumulation_steps=accumulation, learning_rate=0.1, logging_steps=1, save_strategy="no",
        report_to=report_to, remove_unused_columns=False, disable_tqdm=True, dataloader_num_workers=0,
        run_name="grpo-monitor-hf-test",
    )
    trainer = ToyGRPOTrainer(model=ToyPolicy(), args=args, train_dataset=PromptDataset())
    trainer.break_at_step = break_at_step
    return trainer


def test_one_report_per_optimizer_step(tmp_path):
    """With 2 accumulation micro-batches, each optimizer step gives ONE report holding both micro-batches."""
    trainer = make_trainer(tmp_path)
    monitor = hf.attach(trainer, config=MonitorConfig(group_size=G, std_convention="population", expect_on_policy=True),
                        sinks=[JSONLSink(tmp_path / "grpo.jsonl")])
    trainer.grpo_monitor = monitor
    trainer.train()
    records = read_jsonl(tmp_path / "grpo.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3]  # the trainer's global_step
    for rec in records:
        m = rec["metrics"]
        assert rec["violations"] == []
        assert m["grpo/groups/total"] == 4  # 2 micro-batches x 2 prompts
        assert m["grpo/tokens/rows"] == 4 * G
    assert monitor.closed, "on_train_end closes the monitor"


def test_breach_fails_train(tmp_path):
    """Advantages shifted from step 1 on: train() raises InvariantViolation during step 1.

    Under "auto" one shift of every group's z-scores is also the signature of a token whitening
    (AReaL's default), so the breach is the estimator changing from the population lock.
    """
    trainer = make_trainer(tmp_path, break_at_step=1)
    trainer.grpo_monitor = hf.attach(trainer, config=MonitorConfig(group_size=G, repro_dir=str(tmp_path)), sinks=None)
    with pytest.raises(InvariantViolation, match="'convention' broken .* was population, now fits"):
        trainer.train()
    assert trainer.state.global_step == 1


def test_logs_into_the_trainers_wandb_run(wandb_dir):
    """report_to="wandb": the monitor's rows land in the run the trainer opened (one offline run, no second)."""
    import wandb

    from grpo_monitor.sinks.wandb_reader import history_rows, wait_for_exit

    trainer = make_trainer(wandb_dir, steps=2, accumulation=1, report_to="wandb")
    monitor = hf.attach(trainer, config=MonitorConfig(group_size=G), sinks="auto")
    assert [type(s) for s in monitor.sinks.sinks] == [WandbSink]
    trainer.grpo_monitor = monitor
    trainer.train()
    wandb.finish()
    files = list(wandb_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    rows = history_rows(wait_for_exit(files[0]))  # the offline file is written after finish() returns
    assert sum("grpo/groups/degenerate_rate" in r for r in rows) == 2
    assert any("train/loss" in r for r in rows), "the trainer's own rows share the run"


def test_monitored_steps_runs_a_plain_loop():
    """monitored_steps ends one step per item and closes the monitor at the end of the loop."""
    model, gen = ToyPolicy(), torch.Generator().manual_seed(0)
    monitor = GRPOMonitor(MonitorConfig(group_size=G, std_convention="population"))
    for prompt_ids in hf.monitored_steps(monitor, [torch.tensor([0, 1]), torch.tensor([2, 3])]):
        rewards, adv, mask, logp = grpo_batch(model, prompt_ids, gen)
        monitor.observe_rollout(rewards, advantages=adv)
        monitor.observe_loss(mask=mask, advantages=adv.reshape(-1), logprobs=logp.detach())
    assert monitor.step == 2 and monitor.closed


def test_monitored_steps_raises_the_breach():
    """A breach inside the loop surfaces as InvariantViolation from the loop; the monitor is closed."""
    monitor = GRPOMonitor(MonitorConfig(group_size=2))
    with pytest.raises(InvariantViolation):
        for _ in hf.monitored_steps(monitor, range(3)):
            monitor.observe_rollout(torch.tensor([[1.0, 0.0]]), advantages=torch.tensor([[2.0, 1.0]]))
    assert monitor.closed


@pytest.mark.parametrize(
    "report_to, kinds",
    [pytest.param(["wandb"], ["WandbSink"], id="wandb"),
     pytest.param(["tensorboard", "wandb"], ["TensorBoardSink", "WandbSink"], id="both"),
     pytest.param("trackio", ["TrackioSink"], id="trackio"),
     pytest.param(["mlflow", "trackio"], ["MLflowSink", "TrackioSink"], id="mlflow-trackio")],
)
def test_sinks_follow_report_to(report_to, kinds, tmp_path):
    """sinks="auto" builds the sinks of the trainer's report_to; nothing is opened at construction."""
    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to=report_to, use_cpu=True)
    assert [type(s).__name__ for s in hf.resolve_sinks("auto", args)] == kinds
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="sinks must be 'auto', None or a list"):
        hf.resolve_sinks("wandb", args)


def test_report_to_all_follows_the_installed_trackers(tmp_path):
    """report_to="all" (expanded by transformers to what is installed) gets a sink for each supported one."""
    from transformers.integrations.integration_utils import get_available_reporting_integrations

    from grpo_monitor.sinks.auto import SUPPORTED

    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to="all", use_cpu=True)
    names = {type(s).__name__.removesuffix("Sink").lower() for s in hf.resolve_sinks("auto", args)}
    assert names == {n for n in get_available_reporting_integrations() if n in SUPPORTED}
    assert {"wandb", "tensorboard", "trackio", "mlflow"} <= names  # all four are installed in the test venv


def test_no_tracker_writes_a_jsonl_log_in_output_dir_and_prints_its_path(tmp_path, capsys):
    """report_to="none": a JSONL log at <output_dir>/grpo-monitor/monitor.jsonl, its path printed."""
    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    (sink,) = hf.resolve_sinks("auto", args)
    path = tmp_path / "grpo-monitor" / "monitor.jsonl"
    assert isinstance(sink, JSONLSink) and sink.path == path
    assert str(path.resolve()) in capsys.readouterr().err


def test_an_unsupported_tracker_is_named_once(tmp_path):
    """A tracker without a sink is warned about once, by name; the supported ones still get theirs."""
    from grpo_monitor.sinks import auto

    auto._WARNED.discard("swanlab")
    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    args.report_to = ["swanlab", "wandb"]  # swanlab is not installed: set after the arguments' own check
    with pytest.warns(RuntimeWarning, match=r"no sink for the tracker\(s\) \['swanlab'\]"):
        assert [type(s).__name__ for s in hf.resolve_sinks("auto", args)] == ["WandbSink"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hf.resolve_sinks("auto", args)
