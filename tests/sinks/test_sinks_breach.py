"""A breach on the last step reaches every sink before the run ends."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

pytest.importorskip("wandb")
pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from grpo_monitor.sinks import ConsoleSink, JSONLSink, SinkSet, TensorBoardSink, WandbSink, read_jsonl  # noqa: E402
from grpo_monitor.sinks import wandb_reader as R  # noqa: E402


def test_breach_on_last_step_is_in_every_sink(tmp_path, wandb_offline, make_report, make_violation):
    """JSONL line, TensorBoard scalar, W&B row, alert and exit code 1 for the breached step."""
    wandb_sink = WandbSink(project="breach")
    sinks = SinkSet([JSONLSink(tmp_path / "s.jsonl"), TensorBoardSink(tmp_path / "tb"), wandb_sink,
                     ConsoleSink(file=io.StringIO())])
    for step in range(3):
        sinks.emit(make_report(step))
    last = make_report(3, violations=[make_violation(3)], failed=True)
    sinks.emit(last)  # what the monitor does under the "raise" policy, before raising
    assert sinks.flush()  # W&B runs in its own thread: let it open its run before reading it here
    wandb_path = Path(wandb_sink.run.settings.sync_file)
    sinks.finish(failed=True)

    lines = read_jsonl(tmp_path / "s.jsonl")
    assert lines[-1]["step"] == 3 and lines[-1]["failed"] is True
    assert lines[-1]["violations"][0]["invariant"] == "zero_group_mean"

    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    assert acc.Scalars("grpo/invariants/violations")[-1].step == 3
    assert acc.Scalars("grpo/invariants/violations")[-1].value == 1.0

    records = R.wait_for_exit(wandb_path)
    assert R.history_rows(records)[-1]["grpo/step"] == 3
    assert R.history_rows(records)[-1]["grpo/invariants/violations"] == 1.0
    assert [a["level"] for a in R.alerts(records)] == ["ERROR"]
    assert R.exit_code(records) == 1
    assert all(not h.disabled and h.total_failures == 0 for h in sinks.health.values())
