"""Weights & Biases: one history row per step on a ``grpo/step`` axis, alerts on breaches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..catalog.metrics import summary_for
from ..report import StepReport
from .base import Sink
from .layout import STEP_KEY
from .registry import require_backend
from .rows import QUESTION_COLUMNS, ScheduledTables, alert_level, finite, history_row, table_columns, table_data

__all__ = ["QUESTION_COLUMNS", "WandbSink"]


class WandbSink(ScheduledTables, Sink):
    """Logs each report as one W&B history row, with ``grpo/step`` as the x axis.

    With ``run`` given, logs into it. Otherwise, when ``attach_to_active_run`` and a run
    is already active (TRL and the HF Trainer start one: ``wandb.run`` is not None), logs
    into that run instead of opening a second one; else calls
    ``wandb.init(**wandb_init_kwargs)`` on first use. Scalars get a summary defined on
    their exact key as they first appear (the catalogue's
    :func:`~grpo_monitor.catalog.metrics.summary_for`: ``max`` for violation counts, ``last``
    otherwise); histograms go out as ``wandb.Histogram``; each table of the report (the
    per-question ``grpo/questions``) as a ``wandb.Table`` every ``table_every`` steps and
    on the failing step. Each violation raises ``run.alert`` (level ERROR when the step
    ends the run, WARN otherwise). ``finish(failed=True)`` ends the run with exit code 1
    so it shows as failed, even a run it attached to (the breach ends training);
    ``finish(failed=False)`` ends only a run this sink opened. With
    ``attach_to_active_run=False`` while a run is active, pass ``reinit="create_new"``,
    else ``wandb.init`` finishes the active run before opening this one.
    """

    name = "wandb"

    def __init__(
        self,
        run: Any = None,
        *,
        table_every: int = 10,
        attach_to_active_run: bool = True,
        step_key: str = STEP_KEY,
        **wandb_init_kwargs: Any,
    ):
        self.table_every = table_every
        self.attach_to_active_run = attach_to_active_run
        self.step_key = step_key
        self.wandb_init_kwargs = wandb_init_kwargs
        self._run = run
        self._owns_run = False
        self._defined: set[str] = set()
        self._open = run is not None

    @property
    def run(self):
        """The W&B run written to (attached or opened on first access)."""
        if self._run is None:
            require_backend("wandb", "WandbSink needs the `wandb` package")
            import wandb

            if self.attach_to_active_run and wandb.run is not None:
                self._run = wandb.run
            else:
                self._run, self._owns_run = wandb.init(**self.wandb_init_kwargs), True
            self._open = True
        if not self._defined:
            self._run.define_metric(self.step_key)
            self._run.define_metric("grpo/*", step_metric=self.step_key)
            self._defined.add(self.step_key)
        return self._run

    def opening(self) -> bool:
        """True until the run is open: ``wandb.init`` takes 2-13 s on a loaded node (docs/reliability.md)."""
        return not self._open

    def _scalars(self, metrics: dict[str, float]) -> dict[str, float]:
        """``metrics`` as floats, defining each new key's summary before its first value."""
        run = self.run
        for key in metrics:
            if key not in self._defined:
                run.define_metric(key, step_metric=self.step_key, summary=summary_for(key))
                self._defined.add(key)
        return {key: float(value) for key, value in metrics.items()}

    @staticmethod
    def _histogram(values: Sequence[float]):
        import wandb

        kept = finite(values)
        return wandb.Histogram(kept) if kept else None

    @staticmethod
    def _table(rows: list[dict[str, Any]]):
        import wandb

        columns = table_columns(rows)
        header: list[str | int] = list(columns)  # wandb.Table takes a list[str | int]
        return wandb.Table(columns=header, data=table_data(rows, columns))

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log({self.step_key: step, **self._scalars(metrics)})

    def log_histogram(self, key: str, values: Sequence[float], step: int) -> None:
        run = self.run
        histogram = self._histogram(values)
        if histogram is not None:
            run.log({self.step_key: step, key: histogram})

    def log_table(self, key: str, rows: list[dict[str, Any]], step: int) -> None:
        self.run.log({self.step_key: step, key: self._table(rows)})

    def alert(self, title: str, text: str, level: str = "ERROR") -> None:
        name = alert_level(level)
        import wandb

        # wandb exports AlertLevel at run time, but its __init__.pyi does not declare it
        self.run.alert(title=title[:63], text=text, level=wandb.AlertLevel(name))  # type: ignore[attr-defined]

    def log_config(self, params: dict[str, Any]) -> None:
        """The run parameters into the run's config (``grpo_monitor/*`` keys; the trainer's keys untouched)."""
        self.run.config.update(params, allow_val_change=True)

    def log_report(self, report: StepReport) -> None:
        """One history row with the scalars, histograms and (when due) tables of the step."""
        row = history_row(report, self.step_key, self._scalars(report.metrics), self._histogram, self._table,
                          self._tables)
        self.run.log(row)
        if report.estimator is not None:  # grpo/convention: the 0.1 key (the catalogue's alias), kept
            self.run.summary["grpo/estimator"] = self.run.summary["grpo/convention"] = report.estimator
        for v in report.violations:
            # One title per invariant, so W&B's per-title wait_duration rate-limits repeats.
            self.alert(f"grpo-monitor: '{v.invariant}' broken", v.message(), "ERROR" if report.failed else "WARN")

    def finish(self, failed: bool = False) -> None:
        run, self._run = self._run, None
        owned, self._owns_run = self._owns_run, False
        self._open = False
        self._defined.clear()
        self._tables.reset()
        if run is not None and (owned or failed):
            run.finish(exit_code=1 if failed else 0)
