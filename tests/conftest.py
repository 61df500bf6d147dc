"""Fixtures shared by every test: a recording sink, a monitor factory, NaN-aware deep equality."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Sequence
from typing import Any

import pytest

# Trackio fixes its storage folder when imported, and MLflow 3 refuses a file store unless told: every test's
# trackers write under one temporary folder, never into ~/.cache (each test uses its own project/store).
os.environ.setdefault("TRACKIO_DIR", tempfile.mkdtemp(prefix="grpo-monitor-trackio-"))
os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.sinks.base import Sink
from grpo_monitor.testing import RecordingSink


@pytest.fixture
def recording_sink() -> RecordingSink:
    """A fresh :class:`grpo_monitor.testing.RecordingSink`."""
    return RecordingSink()


@pytest.fixture
def make_monitor(tmp_path):
    """``make_monitor(sinks=(), **config)`` -> a strict GRPOMonitor writing repro files under ``tmp_path``."""

    def make(sinks: Sequence[Sink] = (), **config: Any) -> GRPOMonitor:
        config.setdefault("strict", True)
        config.setdefault("repro_dir", str(tmp_path / "repro"))
        return GRPOMonitor(MonitorConfig(**config), sinks=sinks)

    return make


def _same(a: Any, b: Any) -> bool:
    """Deep equality of dicts, lists and tuples where NaN equals NaN (exact otherwise)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.fixture
def same():
    """``same(a, b)``: deep equality where NaN equals NaN."""
    return _same
