"""Helpers to test your own code against grpo-monitor: a sink that records, and ``capture_reports``.

Like structlog's ``capture_logs()``: attach a collector to a monitor, run your training
step, and assert on the :class:`~grpo_monitor.report.StepReport` objects it handed its sinks.

>>> import torch
>>> from grpo_monitor import GRPOMonitor, MonitorConfig
>>> mon = GRPOMonitor(MonitorConfig(group_size=2))
>>> with capture_reports(mon) as reports:
...     mon.observe_rollout(torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
...     _ = mon.end_step()
>>> [r.metrics["grpo/groups/degenerate_rate"] for r in reports]
[0.5]
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .report import StepReport
from .sinks.base import Sink

if TYPE_CHECKING:
    from .monitor import GRPOMonitor

__all__ = ["RecordingSink", "capture_reports"]


class RecordingSink(Sink):
    """A real :class:`~grpo_monitor.sinks.base.Sink` that keeps everything it is handed, in order.

    ``reports`` holds each :class:`StepReport`; ``metrics``, ``histograms``, ``tables`` and
    ``alerts`` the calls the report was split into (``(step, ...)`` tuples), ``configs`` the
    run parameters handed once per run (``log_config``), ``finished`` the ``failed`` flag of each
    ``finish``. Synchronous (in memory and instant), so it is up to
    date when ``end_step`` returns. ``main_process_only=False`` records on every rank.

    >>> from grpo_monitor import GRPOMonitor, MonitorConfig
    >>> sink = RecordingSink()
    >>> with GRPOMonitor(MonitorConfig(), sinks=[sink]) as mon:
    ...     _ = mon.end_step()
    >>> sink.metrics, sink.finished
    ([(0, {'grpo/invariants/violations': 0.0, 'grpo/monitor/disabled_parts': 0.0})], [False])
    """

    name = "recording"
    synchronous = True  # in memory and instant: read it right after end_step

    def __init__(self, *, main_process_only: bool = True) -> None:
        self.main_process_only = main_process_only
        self.metrics: list[tuple[int, dict[str, float]]] = []
        self.histograms: list[tuple[int, str, list[float]]] = []
        self.tables: list[tuple[int, str, list[dict[str, Any]]]] = []
        self.alerts: list[tuple[str, str]] = []
        self.reports: list[StepReport] = []
        self.configs: list[dict[str, Any]] = []
        self.finished: list[bool] = []

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Keep a copy of the step's scalars."""
        self.metrics.append((step, dict(metrics)))

    def log_histogram(self, key: str, values: Sequence[float], step: int) -> None:
        """Keep a copy of a distribution."""
        self.histograms.append((step, key, list(values)))

    def log_table(self, key: str, rows: list[dict[str, Any]], step: int) -> None:
        """Keep a copy of a table's rows."""
        self.tables.append((step, key, list(rows)))

    def alert(self, title: str, text: str, level: str = "ERROR") -> None:
        """Keep an alert's title and text."""
        self.alerts.append((title, text))

    def log_config(self, params: dict[str, Any]) -> None:
        """Keep a copy of the run parameters."""
        self.configs.append(dict(params))

    def log_report(self, report: StepReport) -> None:
        """Keep the report, then split it into the calls above (as every sink does)."""
        self.reports.append(report)
        super().log_report(report)

    def finish(self, failed: bool = False) -> None:
        """Keep the ``failed`` flag."""
        self.finished.append(failed)


@contextlib.contextmanager
def capture_reports(monitor: GRPOMonitor) -> Iterator[list[StepReport]]:
    """Within the block, collect every report ``monitor`` hands its sinks; yields that list.

    A :class:`RecordingSink` (recording on every rank) joins the monitor's sinks on entry
    and leaves on exit, also when the block raises: under the ``"raise"`` policy the
    failing step's report is in the list before the ``InvariantViolation`` leaves the block.

    >>> import torch
    >>> from grpo_monitor import GRPOMonitor, MonitorConfig
    >>> mon = GRPOMonitor(MonitorConfig(group_size=2, on_violation="ignore"))
    >>> with capture_reports(mon) as reports:
    ...     mon.observe_rollout(torch.tensor([[1.0, 0.0]]), advantages=torch.tensor([[float("nan"), 0.0]]))
    ...     _ = mon.end_step()
    >>> [(r.step, [v.invariant for v in r.violations]) for r in reports]
    [(0, ['finite'])]
    """
    sink = RecordingSink(main_process_only=False)
    with monitor.gate.lock:
        monitor.sinks.sinks.append(sink)
    try:
        yield sink.reports
    finally:
        with monitor.gate.lock:
            monitor.sinks.sinks.remove(sink)
            monitor.sinks.health.pop(id(sink), None)
