"""MLflowSink against a real local MLflow file store, read back with MlflowClient."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

mlflow = pytest.importorskip("mlflow")

from tracker_runs import monitored_run  # noqa: E402

from grpo_monitor.sinks import MLflowSink  # noqa: E402
from grpo_monitor.testing import RecordingSink  # noqa: E402


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A file tracking store in tmp_path (MLflow 3 needs MLFLOW_ALLOW_FILE_STORE for it)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    # An earlier test's trainer (transformers' MLflowCallback) may have set an experiment of another store,
    # in mlflow's module state and in MLFLOW_EXPERIMENT_ID: start each test with none active.
    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    monkeypatch.setattr(mlflow.tracking.fluent, "_active_experiment_id", None)
    uri = (tmp_path / "mlruns").as_uri()
    mlflow.set_tracking_uri(uri)
    yield uri
    while mlflow.active_run() is not None:
        mlflow.end_run()


def _history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def _same(a: float, b: float) -> bool:
    return a == pytest.approx(b, rel=1e-12) or (math.isnan(a) and math.isnan(b))


def test_metric_histories_equal_the_jsonl_and_params_are_present(store, tmp_path):
    """Every scalar of every step, on the monitor's step, equals the JSONL's; the config is stored as params."""
    sink = MLflowSink(tracking_uri=store, experiment_name="grpo", run_name="healthy", table_every=1)
    recorder = RecordingSink()
    records = monitored_run(tmp_path, [sink], steps=3, recorder=recorder)
    client = mlflow.MlflowClient(tracking_uri=store)
    (run,) = client.search_runs([client.get_experiment_by_name("grpo").experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == "healthy"
    keys = {k for r in records for k in r["metrics"]}
    assert len(keys) >= 15 and "grpo/groups/degenerate_rate" in keys
    for key in keys:
        expected = [(r["step"], r["metrics"][key]) for r in records if key in r["metrics"]]
        got = _history(client, run.info.run_id, key)
        assert [s for s, _ in got] == [s for s, _ in expected], key
        assert all(_same(a, b) for (_, a), (_, b) in zip(got, expected, strict=True)), key
    assert _history(client, run.info.run_id, "grpo/step") == [(0, 0.0), (1, 1.0), (2, 2.0)]
    params = run.data.params
    assert params["grpo_monitor/estimator"] == "population" and params["grpo_monitor/group_size"] == "4"
    assert params["grpo_monitor/tolerances/zero_group_mean"] == "0.001"
    tables = [a.path for a in client.list_artifacts(run.info.run_id, "grpo_monitor/tables/grpo/questions")]
    with_tables = [step for step, _, _ in recorder.tables]
    assert with_tables and tables == [f"grpo_monitor/tables/grpo/questions/step_{s:06d}.json" for s in with_tables]
    local = client.download_artifacts(run.info.run_id, tables[0], str(tmp_path))
    assert json.loads(Path(local).read_text())["columns"][:2] == ["question_id", "success_rate"]


def test_a_breach_marks_the_run_failed_with_a_tag_and_a_text_artifact(store, tmp_path):
    """The breaching step is logged, the run ends FAILED, the violation is a tag and a text artifact."""
    sink = MLflowSink(tracking_uri=store, experiment_name="grpo")
    records = monitored_run(tmp_path, [sink], steps=3, breach_at=1)
    client = mlflow.MlflowClient(tracking_uri=store)
    (run,) = client.search_runs([client.get_experiment_by_name("grpo").experiment_id])
    assert run.info.status == "FAILED"
    assert run.data.tags["grpo_monitor/failed"] == "true"
    assert "zero_group_mean" in run.data.tags["grpo_monitor/violations"].split(",")
    assert records[-1]["failed"] and records[-1]["step"] == 1
    assert _history(client, run.info.run_id, "grpo/invariants/violations")[-1][0] == 1
    local = client.download_artifacts(run.info.run_id, "grpo_monitor/violations/step_000001.txt", str(tmp_path))
    text = Path(local).read_text()
    assert text.startswith("Run stopped by a breach at step 1.") and "zero_group_mean" in text


def test_logs_into_the_active_run_of_the_training_thread(store, tmp_path):
    """With a run active in the training thread (as TRL's MLflowCallback leaves it), no second run is opened;
    a breach ends that run FAILED."""
    run = mlflow.start_run(run_name="trainer")
    mlflow.log_param("learning_rate", 0.1)
    monitored_run(tmp_path, [MLflowSink()], steps=2, breach_at=1)
    client = mlflow.MlflowClient()
    runs = client.search_runs([run.info.experiment_id])
    assert [r.info.run_id for r in runs] == [run.info.run_id]
    got = client.get_run(run.info.run_id)
    assert got.info.status == "FAILED" and got.data.params["learning_rate"] == "0.1"
    assert "grpo_monitor/estimator" in got.data.params
    assert json.loads(got.data.params["grpo_monitor/clip_range"]) == [0.2, 0.2]


def test_a_metric_name_mlflow_rejects_is_left_out_and_named_once(store, tmp_path):
    """One user metric MLflow refuses ('@' in grpo/user/acc@1): every other key reaches MLflow at every step (the
    JSONL log is the reference), the bad one is dropped, and one SinkWarning names it."""
    import warnings

    from tracker_runs import QUESTIONS, G, rollout

    from grpo_monitor import GRPOMonitor, MonitorConfig
    from grpo_monitor.sinks import JSONLSink, read_jsonl
    from grpo_monitor.sinks.dispatch import SinkWarning

    steps, bad = 20, "grpo/user/acc@1"
    sink = MLflowSink(experiment_name="rejects", run_name="r")
    monitor = GRPOMonitor(MonitorConfig(group_size=G), sinks=[JSONLSink(tmp_path / "m.jsonl"), sink])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with monitor:
            for step in range(steps):
                rewards, advantages = rollout(step)
                monitor.observe_rollout(rewards, advantages=advantages, question_ids=QUESTIONS)
                monitor.add_metrics({bad: 0.5, "grpo/user/fine": float(step)})
                monitor.end_step()
    records = read_jsonl(tmp_path / "m.jsonl")
    client = mlflow.MlflowClient(store)
    run = client.search_runs([client.get_experiment_by_name("rejects").experiment_id])[0]
    logged = run.data.metrics
    expected = {k for r in records for k in r["metrics"]} - {bad}
    assert bad not in logged and expected <= set(logged)
    for key in sorted(expected):
        assert [s for s, _ in _history(client, run.info.run_id, key)] == [r["step"] for r in records
                                                                          if key in r["metrics"]], key
    texts = [str(w.message) for w in caught if issubclass(w.category, SinkWarning)]
    assert len(texts) == 1 and bad in texts[0] and "'mlflow'" in texts[0] and "left out" in texts[0], texts
