"""Shared fixtures of the sink tests: step reports, an offline W&B sandbox."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from grpo_monitor.report import StepReport
from grpo_monitor.sinks.layout import KNOWN_KEYS
from grpo_monitor.violations import Violation


def _make_metrics(step: int) -> dict[str, float]:
    """A value for every known key; distinct per key and step, so read-backs are checkable."""
    return {key: round(0.001 * (i + 1) + step, 6) for i, key in enumerate(KNOWN_KEYS)}


def _make_violation(step: int, invariant: str = "zero_group_mean") -> Violation:
    return Violation(invariant, step, observed=0.3, expected="< 0.001", groups=(3, 7), hint="mean not subtracted")


def _make_report(step: int, *, violations=(), failed: bool = False, n_questions: int = 4,
                 hist_size: int = 16) -> StepReport:
    """A full StepReport: all known metrics, two histograms, the per-question table."""
    metrics = _make_metrics(step)
    if violations:
        metrics["grpo/invariants/violations"] = float(len(violations))
    rows = [
        {"question_id": f"q{i}", "success_rate": i / n_questions, "reward_std": 0.1 * i,
         "times_seen": step + 1, "times_filtered": i % 2}
        for i in range(n_questions)
    ]
    return StepReport(
        step=step,
        metrics=metrics,
        violations=list(violations),
        convention="population",
        histograms={
            "grpo/reward/question_std": [0.01 * i for i in range(hist_size)],
            "grpo/adv/values": [math.sin(i + step) for i in range(hist_size)],
        },
        tables={"grpo/questions": rows},
        flagged_questions=["q1"] if violations else [],
        failed=failed,
    )


@pytest.fixture
def make_report():
    """``make_report(step, violations=(), failed=False)`` -> a full StepReport."""
    return _make_report


@pytest.fixture
def make_violation():
    """``make_violation(step, invariant="zero_group_mean")`` -> a Violation."""
    return _make_violation


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch) -> Path:
    """W&B in offline mode with every directory it writes inside ``tmp_path``."""
    root = tmp_path / "wandb_home"
    root.mkdir()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_CONFIG_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(root))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    yield root
    import wandb

    if wandb.run is not None:
        wandb.run.finish()
    wandb.teardown()
