"""WandbSink writes the estimator's name to the run summary under grpo/estimator and its 0.1 key grpo/convention."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("wandb")

from grpo_monitor.catalog.metrics import METRICS  # noqa: E402
from grpo_monitor.sinks import WandbSink  # noqa: E402
from grpo_monitor.sinks import wandb_reader as R  # noqa: E402


def test_the_run_summary_names_the_estimator_under_both_keys(wandb_offline, make_report):
    """A real offline run, read back from its .wandb file: both summary keys hold the report's estimator."""
    sink = WandbSink(project="p")
    report = make_report(0)
    report.estimator = "verl.grpo"
    sink.log_report(report)
    path = Path(sink.run.settings.sync_file)
    sink.finish(failed=False)
    summary = R.summary(R.wait_for_exit(path))
    assert summary["grpo/estimator"] == summary["grpo/convention"] == "verl.grpo"
    assert METRICS["grpo/convention"].alias_of == "grpo/estimator" and METRICS["grpo/estimator"].kind == "text"
