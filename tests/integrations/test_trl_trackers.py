"""A real TRL GRPOTrainer with report_to="trackio" / "mlflow" / "none": the grpo/ keys go where TRL logs.

The monitor is attached with ``sinks="auto"``; each test reads the tracker's own storage back
(Trackio's SQLite database, MLflow's file store) and compares it with the reports the monitor
handed its sinks (``GRPOMonitorCallback.reports``).
"""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("trl")

from grpo_monitor.integrations import trl as gtrl  # noqa: E402
from grpo_monitor.sinks import read_jsonl  # noqa: E402
from tiny_trl import make_trainer  # noqa: E402

pytestmark = pytest.mark.slow


def _reports(trainer) -> dict[int, dict[str, float]]:
    (callback,) = [c for c in trainer.callback_handler.callbacks if isinstance(c, gtrl.GRPOMonitorCallback)]
    return {r.step: r.metrics for r in callback.reports}


def test_report_to_trackio_logs_into_the_trainers_run(tiny_model_path, tmp_path):
    """grpo/ keys and TRL's own train/ keys in ONE Trackio run, the trainer's; the monitor's config in its config."""
    trackio = pytest.importorskip("trackio")
    project = f"trl-{uuid.uuid4().hex[:8]}"
    trainer = make_trainer(tiny_model_path, tmp_path / "out", report_to="trackio", project=project,
                           run_name="trl-trackio", max_steps=3)
    gtrl.attach(trainer)
    trainer.train()
    assert trackio.SQLiteStorage.get_runs(project) == ["trl-trackio"]
    logs = trackio.SQLiteStorage.get_logs(project, "trl-trackio")
    ours = {row["step"]: row for row in logs if "grpo/groups/degenerate_rate" in row}
    reports = _reports(trainer)
    assert sorted(ours) == sorted(reports) == [1, 2, 3]
    for step, metrics in reports.items():
        assert ours[step]["grpo/reward/mean"] == pytest.approx(metrics["grpo/reward/mean"], rel=1e-12)
        assert ours[step]["grpo/step"] == step
    assert any(k.startswith("train/") or k in ("loss", "reward") for row in logs for k in row)
    config = trackio.SQLiteStorage.get_run_config(project, "trl-trackio")
    assert config["grpo_monitor/estimator"] == "trl.group" and config["grpo_monitor/group_size"] == 4


def test_report_to_mlflow_logs_into_the_trainers_run(tiny_model_path, tmp_path, monkeypatch):
    """grpo/ metric histories in the run TRL's MLflowCallback opened (no second run), params beside TRL's."""
    mlflow = pytest.importorskip("mlflow")
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "trl")
    trainer = make_trainer(tiny_model_path, tmp_path / "out", report_to="mlflow", run_name="trl-mlflow",
                           max_steps=2)
    gtrl.attach(trainer)
    trainer.train()
    client = mlflow.MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("trl").experiment_id])
    assert run.info.run_name == "trl-mlflow"
    history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "grpo/reward/mean")}
    reports = _reports(trainer)
    assert history == pytest.approx({step: m["grpo/reward/mean"] for step, m in reports.items()}, rel=1e-12)
    assert sorted(history) == [1, 2]
    assert run.data.params["grpo_monitor/estimator"] == "trl.group" and "learning_rate" in run.data.params


def test_report_to_none_writes_a_jsonl_log_in_output_dir(tiny_model_path, tmp_path, capfd):
    """No tracker: the monitor's log lands in <output_dir>/grpo-monitor/monitor.jsonl and its path is printed."""
    trainer = make_trainer(tiny_model_path, tmp_path / "out", report_to="none", max_steps=2)
    gtrl.attach(trainer)
    path = tmp_path / "out" / "grpo-monitor" / "monitor.jsonl"
    assert str(path.resolve()) in capfd.readouterr().err
    trainer.train()
    assert [r["step"] for r in read_jsonl(path)] == [1, 2]
