"""Trackio (TRL's recommended tracker): one log entry per step, histograms, tables, alerts, run config.

Trackio's current run is a context variable of the thread that called ``trackio.init``
(TRL's ``TrackioCallback``, verl's ``Tracking``), and this sink runs in a thread of its
own: :meth:`TrackioSink.capture` reads that run in the training thread, so the monitor's
``grpo/*`` keys land in the trainer's run, not in a second one. trackio is imported only
when a run is opened or a value built; ``capture`` looks only at a trackio already imported.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from ..report import StepReport
from .base import Sink
from .layout import STEP_KEY
from .registry import require_backend
from .rows import ScheduledTables, alert_level, finite, history_row, table_columns, table_data


class TrackioSink(ScheduledTables, Sink):
    """Logs each report as one Trackio entry on the monitor's step (and ``grpo/step``).

    With ``run`` given, logs into it; else, when ``attach_to_active_run``, into the run
    current in the training thread (see :meth:`capture`); else ``trackio.init(**init_kwargs)``
    on first use (``project`` defaults to ``"grpo-monitor"``). Histograms go out as
    ``trackio.Histogram``, the per-question table as ``trackio.Table`` every ``table_every``
    steps and on the failing step, each violation as ``run.alert`` (ERROR when the step
    ends the run, WARN otherwise), the run configuration into ``run.config``.
    ``finish(failed=True)`` raises an ERROR alert "run failed" (Trackio has no run status)
    and finishes a run this sink opened; ``finish()`` finishes only a run it opened.
    """

    name = "trackio"

    def __init__(self, run: Any = None, *, attach_to_active_run: bool = True, table_every: int = 10,
                 step_key: str = STEP_KEY, **init_kwargs: Any):
        self.given_run = run
        self.attach_to_active_run = attach_to_active_run
        self.table_every = table_every
        self.step_key = step_key
        self.init_kwargs = {"project": "grpo-monitor", **init_kwargs}
        self._run = run
        self._owns_run = False
        self._params: dict[str, Any] | None = None  # the run configuration, for a run opened or attached later

    def capture(self) -> None:
        """In the training thread: the trainer's current Trackio run, when trackio is loaded and one is current."""
        trackio = sys.modules.get("trackio")
        if self._run is None and self.attach_to_active_run and trackio is not None:
            self._run = trackio.context_vars.current_run.get()

    @property
    def run(self) -> Any:
        """The ``trackio.Run`` written to (captured, given, or opened on first access)."""
        if self._run is None:
            require_backend("trackio", "TrackioSink needs the `trackio` package")
            import trackio

            kwargs = dict(self.init_kwargs)
            kwargs["config"] = {**(kwargs.get("config") or {}), **(self._params or {})}
            self._run, self._owns_run = trackio.init(**kwargs), True
        return self._run

    @staticmethod
    def _histogram(values: Sequence[float]) -> Any:
        import trackio

        kept = finite(values)
        return trackio.Histogram(kept) if kept else None

    @staticmethod
    def _table(rows: list[dict[str, Any]]) -> Any:
        import trackio

        columns = table_columns(rows)
        return trackio.Table(columns=columns, data=table_data(rows, columns))

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log({self.step_key: step, **{k: float(v) for k, v in metrics.items()}}, step=step)

    def log_histogram(self, key: str, values: Sequence[float], step: int) -> None:
        histogram = self._histogram(values)
        if histogram is not None:
            self.run.log({self.step_key: step, key: histogram}, step=step)

    def log_table(self, key: str, rows: list[dict[str, Any]], step: int) -> None:
        self.run.log({self.step_key: step, key: self._table(rows)}, step=step)

    def alert(self, title: str, text: str, level: str = "ERROR") -> None:
        name = alert_level(level)
        import trackio

        self.run.alert(title=title, text=text, level=trackio.AlertLevel[name])

    def log_config(self, params: dict[str, Any]) -> None:
        """The run parameters into ``run.config``: ``trackio.init(config=...)`` of a run opened here; merged
        into the config of a run attached to, which is then re-sent with each of this sink's entries."""
        self._params = dict(params)
        if self._run is not None:
            self._run.config.update(params)

    def _resend_config(self) -> None:
        """Trackio 0.4x stores a run's config from the first entry of a batch that carries one, and the
        trainer's first entry carries its own: re-send the merged config with this sink's entries."""
        if self._params and not self._owns_run and getattr(self._run, "_config_logged", False):
            self._run._config_logged = False
            _merge_into_queued_configs(self._run)

    def log_report(self, report: StepReport) -> None:
        """One entry with the scalars, histograms and (when due) tables of the step; an alert per violation."""
        scalars = {k: float(v) for k, v in report.metrics.items()}
        row = history_row(report, self.step_key, scalars, self._histogram, self._table, self._tables)
        self._resend_config()
        self.run.log(row, step=report.step)
        for v in report.violations:
            self.alert(f"grpo-monitor: '{v.invariant}' broken", v.message(), "ERROR" if report.failed else "WARN")

    def finish(self, failed: bool = False) -> None:
        run, owned = self._run, self._owns_run
        self._run, self._owns_run, self._params = self.given_run, False, None
        self._tables.reset()
        if run is None:
            return
        if failed:
            import trackio

            run.alert(title="grpo-monitor: run failed", text="an invariant breach ended the run",
                      level=trackio.AlertLevel.ERROR)
        if owned:
            run.finish()


def _merge_into_queued_configs(run: Any) -> None:
    """A batch keeps the config of its first entry that carries one: an entry of the trainer still queued
    with the config as it was before ours was merged would win over ours. Give those entries the merged one."""
    lock, queued = getattr(run, "_queue_lock", None), getattr(run, "_queued_logs", None)
    if lock is None or not isinstance(queued, list):
        return
    with lock:
        for entry in queued:
            if isinstance(entry, dict) and entry.get("config"):
                entry["config"] = {**entry["config"], **dict(run.config)}
