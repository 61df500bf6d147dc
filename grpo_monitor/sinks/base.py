"""The one small interface every sink implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..report import StepReport


class Sink:
    """Where a step's report goes. Subclasses override what their backend supports.

    Constructing a sink has no side effects (no files, no runs, no imports of optional
    packages); the backend is opened on first use. ``main_process_only`` sinks are only
    called on rank 0.

    ``synchronous`` chooses how :class:`~grpo_monitor.sinks.SinkSet` calls the sink. False
    (the default: W&B, TensorBoard, console, user sinks): from a thread of its own, fed in
    order from a bounded queue, so a slow or hung backend never delays training; all of
    the sink's calls (``log_report``, ``alert``, ``finish``) come from that one thread, and
    reports are dropped, with a warning, while it is blocked. True, for durable sinks
    (JSONL): inline in the training thread, so a step is written when ``end_step``
    returns; such a sink must be fast, and it is retried on every step after a failure.
    """

    name: str = "sink"
    main_process_only: bool = True
    synchronous: bool = False

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Write scalar metrics for ``step``."""

    def log_histogram(self, key: str, values: Sequence[float], step: int) -> None:
        """Write a distribution (e.g. per-question reward std) for ``step``."""

    def log_table(self, key: str, rows: list[dict[str, Any]], step: int) -> None:
        """Write a table (e.g. per-question history) for ``step``."""

    def alert(self, title: str, text: str, level: str = "ERROR") -> None:
        """Raise an alert in the backend (a breach)."""

    def log_report(self, report: StepReport) -> None:
        """Write a whole step; the default splits it into the calls above."""
        self.log(report.metrics, report.step)
        for key, values in report.histograms.items():
            self.log_histogram(key, values, report.step)
        for key, rows in report.tables.items():
            self.log_table(key, rows, report.step)
        for v in report.violations:
            self.alert(f"grpo-monitor: {v.invariant}", v.message())

    def finish(self, failed: bool = False) -> None:
        """Flush and close; ``failed`` marks a run ended by a breach."""
