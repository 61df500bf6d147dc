"""What the tracker sinks (W&B, Trackio, MLflow, TensorBoard) share: a step's history row and its tables.

Pure (no backend imports): each sink passes its backend's histogram and table builders.
:class:`TableSchedule` decides when the per-question table goes out (every ``table_every``
steps and on the failing step); :func:`history_row` builds the one row a step logs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..report import StepReport

#: Columns of the per-question table, in display order (extra columns follow).
QUESTION_COLUMNS = ("question_id", "success_rate", "reward_std", "times_seen", "times_filtered")
#: Alert levels a sink takes (any case), by the trackers' name for them.
LEVELS = {"INFO": "INFO", "WARN": "WARN", "WARNING": "WARN", "ERROR": "ERROR"}


class TableSchedule:
    """When a sink writes the report's tables: on its first report, every ``every`` steps, on the failing step.

    >>> s = TableSchedule(2)
    >>> [s.take(StepReport(step, {}, tables={"q": []})) for step in range(4)]
    [True, False, True, False]
    """

    def __init__(self, every: int):
        self.every = every
        self.last: int | None = None

    @property
    def every(self) -> int:
        """Steps between two reports whose tables are written (``table_every``)."""
        return self._every

    @every.setter
    def every(self, every: int) -> None:
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"Expected argument `table_every` to be an int >= 1 but got {every!r}")
        self._every = every

    def due(self, report: StepReport) -> bool:
        """Whether ``report``'s tables are due (it has some, and the schedule says so)."""
        if not report.tables:
            return False
        return report.failed or self.last is None or report.step - self.last >= self.every

    def take(self, report: StepReport) -> bool:
        """:meth:`due`, and when it is, the tables count as written at ``report.step``."""
        if not self.due(report):
            return False
        self.last = report.step
        return True

    def reset(self) -> None:
        """A new run: the next report with tables writes them."""
        self.last = None


class ScheduledTables:
    """A tracker sink's ``table_every``: the period of its :class:`TableSchedule` ``_tables`` (checked when set)."""

    _tables: TableSchedule

    @property
    def table_every(self) -> int:
        return self._tables.every

    @table_every.setter
    def table_every(self, every: int) -> None:
        if "_tables" in self.__dict__:
            self._tables.every = every
        else:
            self._tables = TableSchedule(every)


def history_row(report: StepReport, step_key: str, scalars: Mapping[str, Any],
                histogram: Callable[[Sequence[float]], Any], table: Callable[[list[dict[str, Any]]], Any],
                tables: TableSchedule) -> dict[str, Any]:
    """The one row a step logs: ``step_key``, the ``scalars``, each histogram ``histogram`` builds (``None``:
    left out) and, when ``tables`` says they are due, each table ``table`` builds."""
    row: dict[str, Any] = {step_key: report.step, **scalars}
    for key, values in report.histograms.items():
        built = histogram(values)
        if built is not None:
            row[key] = built
    if tables.take(report):
        row.update({key: table(rows) for key, rows in report.tables.items()})
    return row


def finite(values: Iterable[float]) -> list[float]:
    """The finite values as floats (a tracker cannot bin NaN or inf; an empty list: no histogram).

    >>> finite([1, float("nan"), 2.5, float("inf")])
    [1.0, 2.5]
    """
    return [float(v) for v in values if math.isfinite(float(v))]


def cell(value: Any) -> Any:
    """A table cell a tracker stores as it is: numbers, strings, booleans and None; anything else as ``str``."""
    return value if isinstance(value, (int, float, str, bool)) or value is None else str(value)


def table_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The columns of ``rows``: the known ones (:data:`QUESTION_COLUMNS`) present, in their order, then the rest.

    >>> table_columns([{"extra": 1, "reward_std": 0.5, "question_id": "q"}])
    ['question_id', 'reward_std', 'extra']
    """
    extra = [k for row in rows for k in row if k not in QUESTION_COLUMNS]
    return [c for c in QUESTION_COLUMNS if any(c in row for row in rows)] + list(dict.fromkeys(extra))


def table_data(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> list[list[Any]]:
    """``rows`` as lists of cells in ``columns`` order (a missing key: None)."""
    return [[cell(row.get(c)) for c in columns] for row in rows]


def alert_level(level: str) -> str:
    """``level`` as ``INFO``, ``WARN`` or ``ERROR`` (any case; ``WARNING`` is ``WARN``); else a worded error.

    >>> alert_level("warning")
    'WARN'
    """
    if not isinstance(level, str) or level.upper() not in LEVELS:
        raise ValueError(f"Expected argument `level` to be one of INFO, WARN, ERROR but got {level!r}")
    return LEVELS[level.upper()]
