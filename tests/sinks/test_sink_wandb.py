"""WandbSink against real offline W&B runs, read back from the .wandb file."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("wandb")

from grpo_monitor.sinks import WandbSink  # noqa: E402
from grpo_monitor.sinks import wandb_reader as R  # noqa: E402
from grpo_monitor.sinks.layout import KNOWN_KEYS  # noqa: E402


def _run_sink(sink, reports, failed=False):
    """Log ``reports``, finish, and return (records, path) once the exit record is written."""
    for report in reports:
        sink.log_report(report)
    path = Path(sink.run.settings.sync_file)
    sink.finish(failed=failed)
    return R.wait_for_exit(path), path


def test_construction_has_no_side_effects(wandb_offline):
    """Constructing the sink starts no run and writes nothing."""
    import wandb

    WandbSink(project="p")
    assert wandb.run is None
    assert list(wandb_offline.iterdir()) == []


def test_history_rows_on_the_step_axis(wandb_offline, make_report):
    """One history row per step with grpo/step, every scalar, histograms; NaN kept."""
    reports = [make_report(step) for step in range(3)]
    reports[1].metrics["grpo/ratio/mean"] = float("nan")
    records, _ = _run_sink(WandbSink(project="p"), reports)
    rows = R.history_rows(records)
    assert [row["grpo/step"] for row in rows] == [0, 1, 2]
    for row, report in zip(rows, reports, strict=True):
        assert all(row[k] == v or math.isnan(v) for k, v in report.metrics.items())
        assert row["grpo/adv/values"]["_type"] == "histogram"
        assert sum(row["grpo/reward/question_std"]["values"]) == 16
    assert math.isnan(rows[1]["grpo/ratio/mean"])
    assert R.exit_code(records) == 0


def test_metrics_are_defined_on_the_step_axis_with_exact_summaries(wandb_offline, make_report):
    """grpo/* uses grpo/step as x axis; summaries are defined per exact scalar key only."""
    records, _ = _run_sink(WandbSink(project="p"), [make_report(0), make_report(1)])
    definitions = R.metric_definitions(records)
    globs = [d for d in definitions if d["glob_name"]]
    assert globs == [{"name": "", "glob_name": "grpo/*", "step_metric": "grpo/step", "summary": []}]
    exact = {d["name"]: d for d in definitions if d["name"] and d["summary"]}
    assert set(exact) == set(KNOWN_KEYS)
    assert all(d["step_metric"] == "grpo/step" for d in exact.values())
    assert exact["grpo/invariants/violations"]["summary"] == ["max"]
    assert exact["grpo/groups/degenerate_rate"]["summary"] == ["last"]
    summary = R.summary(records)
    assert summary["grpo/groups/degenerate_rate"] == {"last": make_report(1).metrics["grpo/groups/degenerate_rate"]}
    assert summary["grpo/adv/values"]["_type"] == "histogram", "histograms keep their own summary"
    assert summary["grpo/convention"] == "population"


def test_question_table_every_n_steps(wandb_offline, make_report):
    """The per-question table goes out every table_every steps, with the documented columns."""
    reports = [make_report(step) for step in range(5)]
    records, path = _run_sink(WandbSink(project="p", table_every=2), reports)
    rows = R.history_rows(records)
    with_table = [row["grpo/step"] for row in rows if "grpo/questions" in row]
    assert with_table == [0, 2, 4]
    table = R.load_table(path, rows[4]["grpo/questions"])
    assert table == reports[4].tables["grpo/questions"]
    assert list(table[0]) == ["question_id", "success_rate", "reward_std", "times_seen", "times_filtered"]


def test_breach_alerts_and_fails_the_run(wandb_offline, make_report, make_violation):
    """A failing step raises an ERROR alert and finish(failed=True) ends the run with exit code 1."""
    reports = [make_report(0), make_report(1, violations=[make_violation(1)], failed=True)]
    records, _ = _run_sink(WandbSink(project="p"), reports, failed=True)
    (alert,) = R.alerts(records)
    assert alert["level"] == "ERROR" and "zero_group_mean" in alert["title"]
    assert "step 1" in alert["text"] and "first offending groups: [3, 7]" in alert["text"]
    assert R.exit_code(records) == 1
    assert R.history_rows(records)[-1]["grpo/step"] == 1


def test_attaches_to_the_active_run(wandb_offline, make_report):
    """With a run already active (as TRL starts one), the sink logs into it and leaves it open."""
    import wandb

    run = wandb.init(project="p")
    sink = WandbSink(project="ignored")
    sink.log_report(make_report(0))
    assert sink.run is run
    sink.finish(failed=False)
    assert wandb.run is run, "a run the sink did not open is not finished on success"
    run.log({"train/loss": 1.0})
    path = Path(run.settings.sync_file)
    run.finish()
    records = R.wait_for_exit(path)
    assert [row.get("grpo/step") for row in R.history_rows(records)] == [0, None]
    assert len(list(wandb_offline.glob("wandb/offline-run-*/*.wandb"))) == 1, "no second run"


def test_explicit_run_is_used_and_a_breach_ends_it(wandb_offline, make_report):
    """run= logs into the given run; finish(failed=True) ends it with exit code 1."""
    import wandb

    run = wandb.init(project="p")
    sink = WandbSink(run=run)
    sink.log_report(make_report(0))
    sink.finish(failed=True)  # the breach ends even a run the sink did not open
    records = R.wait_for_exit(run.settings.sync_file)
    assert R.exit_code(records) == 1 and R.history_rows(records)[0]["grpo/step"] == 0


def test_no_attach_opens_a_second_run_and_finishes_only_it(wandb_offline, make_report):
    """attach_to_active_run=False (with reinit="create_new") opens and later finishes its own run."""
    import wandb

    trainer_run = wandb.init(project="p")
    sink = WandbSink(attach_to_active_run=False, project="p", reinit="create_new")
    sink.log_report(make_report(0))
    own = sink.run
    assert own is not trainer_run
    sink.finish()
    assert R.exit_code(R.wait_for_exit(own.settings.sync_file)) == 0
    trainer_run.log({"train/loss": 1.0})
    trainer_run.finish()
    assert [row.get("grpo/step") for row in R.history_rows(R.wait_for_exit(trainer_run.settings.sync_file))] == [None]


def test_arguments_are_validated():
    """table_every and alert levels are checked with worded errors."""
    with pytest.raises(ValueError, match="`table_every` to be an int >= 1"):
        WandbSink(table_every=0)
    with pytest.raises(ValueError, match="`level` to be one of INFO, WARN, ERROR"):
        WandbSink(run=object()).alert("t", "x", level="FATAL")


def test_close_waits_for_the_run_to_open_before_its_flush_clock(wandb_offline):
    """A 5-step run whose WandbSink opens its own run, closed at once with a flush_timeout shorter than wandb.init
    takes (measured 1.8-13 s on this 2-core machine under load): every step reaches the run and nothing is
    abandoned; the flush clock measures the writes, not the opening."""
    import warnings

    import torch

    from grpo_monitor import GRPOMonitor, MonitorConfig
    from grpo_monitor.sinks.dispatch import SinkWarning

    rewards = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0]])
    centred = rewards - rewards.mean(1, keepdim=True)
    advantages = centred / (rewards.std(1, correction=0, keepdim=True) + 1e-6)
    monitor = GRPOMonitor(MonitorConfig(group_size=4, sink_flush_timeout=0.2), sinks=[WandbSink(project="p")])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):
            monitor.observe_rollout(rewards, advantages=advantages)
            monitor.end_step()
        monitor.close()
    assert [str(w.message) for w in caught if issubclass(w.category, SinkWarning)] == []
    (path,) = wandb_offline.rglob("run-*.wandb")
    rows = R.history_rows(R.wait_for_exit(path))
    assert [row["grpo/step"] for row in rows] == [0, 1, 2, 3, 4]
