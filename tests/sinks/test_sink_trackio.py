"""TrackioSink against Trackio's real local storage, read back from its SQLite database."""

from __future__ import annotations

import math
import time
import uuid

import pytest

trackio = pytest.importorskip("trackio")

from tracker_runs import monitored_run  # noqa: E402

from grpo_monitor.sinks import TrackioSink  # noqa: E402
from grpo_monitor.testing import RecordingSink  # noqa: E402


@pytest.fixture
def project() -> str:
    """A fresh Trackio project name (the storage folder is the session's TRACKIO_DIR)."""
    return f"grpo-test-{uuid.uuid4().hex[:8]}"


def _logs(project: str, run: str) -> list[dict]:
    return trackio.SQLiteStorage.get_logs(project, run)


def test_scalars_histograms_tables_and_config_reach_the_database(project, tmp_path):
    """Every scalar of every step equals the JSONL's, at the monitor's step; histograms, a table, the config."""
    sink = TrackioSink(project=project, name="healthy", table_every=1)
    recorder = RecordingSink()
    records = monitored_run(tmp_path, [sink], steps=3, recorder=recorder)
    logs = _logs(project, "healthy")
    assert [row["step"] for row in logs] == [0, 1, 2]
    for row, record in zip(logs, records, strict=True):
        for key, value in record["metrics"].items():
            assert row[key] == pytest.approx(value, rel=1e-12) or (math.isnan(value) and math.isnan(row[key])), key
        assert row["grpo/step"] == record["step"]
    assert logs[0]["grpo/adv/values"]["_type"] == "trackio.histogram"
    table_steps = [step for step, _, _ in recorder.tables]
    assert table_steps and all(logs[s]["grpo/questions"]["_type"] == "trackio.table" for s in table_steps)
    config = trackio.SQLiteStorage.get_run_config(project, "healthy")
    assert config["grpo_monitor/estimator"] == "population" and config["grpo_monitor/group_size"] == 4


def test_a_breach_raises_alerts(project, tmp_path):
    """The breaching step is logged; each violation and the failed run are ERROR alerts in the database."""
    monitored_run(tmp_path, [TrackioSink(project=project, name="broken")], steps=3, breach_at=1)
    assert [row["step"] for row in _logs(project, "broken")] == [0, 1]
    alerts = trackio.SQLiteStorage.get_alerts(project, run_name="broken")
    titles = {(a["title"], a["level"]) for a in alerts}
    assert ("grpo-monitor: 'zero_group_mean' broken", "error") in titles
    assert ("grpo-monitor: run failed", "error") in titles


def test_logs_into_the_current_run_of_the_training_thread(project, tmp_path):
    """With a run current in the training thread (as TRL's TrackioCallback leaves it), the keys land in it."""
    run = trackio.init(project=project, name="trainer", config={"learning_rate": 0.1})
    run.log({"loss": 1.0}, step=0)
    deadline = time.monotonic() + 10
    while not _logs(project, "trainer") and time.monotonic() < deadline:  # the trainer's entry is stored (a
        time.sleep(0.05)  # step's work later), so the monitor's config arrives in a batch of its own
    monitored_run(tmp_path, [TrackioSink()], steps=2)
    trackio.finish()
    assert trackio.SQLiteStorage.get_runs(project) == ["trainer"]
    logs = _logs(project, "trainer")
    assert any("grpo/groups/degenerate_rate" in row for row in logs) and any("loss" in row for row in logs)
    config = trackio.SQLiteStorage.get_run_config(project, "trainer")
    assert config["learning_rate"] == 0.1 and config["grpo_monitor/estimator"] == "population"
