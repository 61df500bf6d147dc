"""What the health layer remembers between steps: short windows of a few figures, run totals and a few
first values. Bounded (a window is at most :data:`WINDOW` values), plain data, saved by ``state_dict``."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np

#: Values kept per series: the trend windows of the rules read at most this many recent steps.
WINDOW = 20
#: Values that make a series' starting level (their median).
START = 5


class Memory:
    """Recent values of the series the rules trend, their starting levels, and the run's step and time totals."""

    def __init__(self) -> None:
        self.series: dict[str, deque[float]] = {}
        self.first: dict[str, list[float]] = {}
        self.totals: dict[str, float] = {}

    def push(self, name: str, value: float) -> None:
        """Append a finite ``value`` to series ``name`` (NaN and infinities are skipped)."""
        if not math.isfinite(value):
            return
        self.series.setdefault(name, deque(maxlen=WINDOW)).append(float(value))
        start = self.first.setdefault(name, [])
        if len(start) < START:
            start.append(float(value))

    def recent(self, name: str, n: int = WINDOW) -> np.ndarray:
        """The last ``n`` values of ``name`` (oldest first)."""
        values = self.series.get(name, ())
        return np.asarray(list(values)[-n:], dtype=np.float64)

    def start(self, name: str) -> float:
        """The median of the series' first values (NaN before any)."""
        values = self.first.get(name)
        return float(np.median(values)) if values else math.nan

    def add(self, name: str, value: float) -> float:
        """Add ``value`` to the run total ``name``; the new total."""
        self.totals[name] = self.totals.get(name, 0.0) + float(value)
        return self.totals[name]

    def total(self, name: str) -> float:
        return self.totals.get(name, 0.0)

    def state_dict(self) -> dict[str, Any]:
        return {"series": {k: list(v) for k, v in self.series.items()},
                "first": {k: list(v) for k, v in self.first.items()}, "totals": dict(self.totals)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.series = {str(k): deque((float(x) for x in v), maxlen=WINDOW) for k, v in state["series"].items()}
        self.first = {str(k): [float(x) for x in v][:START] for k, v in state["first"].items()}
        self.totals = {str(k): float(v) for k, v in state["totals"].items()}


def theil_sen(values: np.ndarray) -> tuple[float, float]:
    """Robust trend of equally spaced ``values``: the median of the pairwise slopes (Theil-Sen) and the share of
    pairs that rise minus the share that fall (Kendall's tau, in [-1, 1]); (NaN, NaN) for fewer than 3 values.

    >>> theil_sen(np.array([1.0, 2.0, 3.0, 4.0, 20.0]))
    (1.0, 1.0)
    """
    n = len(values)
    if n < 3:
        return math.nan, math.nan
    i, j = np.triu_indices(n, 1)
    diffs = values[j] - values[i]
    return float(np.median(diffs / (j - i))), float((np.sign(diffs).sum()) / len(diffs))
