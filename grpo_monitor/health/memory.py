"""What the health layer remembers between steps: short windows of a few figures, run totals and a few
first values. Bounded (a window is at most :data:`WINDOW` values), plain data, saved by ``state_dict``."""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from typing import Any

#: Values kept per series: the trend windows of the rules read at most this many recent steps.
WINDOW = 40
#: Values that make a series' starting level (their median).
START = 5


class Memory:
    """Recent values of the series the rules trend, their starting levels, and the run's step and time totals."""

    def __init__(self) -> None:
        self.series: dict[str, deque[float]] = {}
        self.first: dict[str, list[float]] = {}
        self.totals: dict[str, float] = {}
        #: Wall-clock totals (seconds between steps): this process's only, never saved (a resumed run would not
        #: match the uninterrupted one, and the time of another process is not this one's).
        self.clock: dict[str, float] = {}

    def push(self, name: str, value: float) -> None:
        """Append a finite ``value`` to series ``name`` (NaN and infinities are skipped)."""
        if not math.isfinite(value):
            return
        self.series.setdefault(name, deque(maxlen=WINDOW)).append(float(value))
        start = self.first.setdefault(name, [])
        if len(start) < START:
            start.append(float(value))

    def recent(self, name: str, n: int = WINDOW) -> list[float]:
        """The last ``n`` values of ``name`` (oldest first). Plain lists: the windows are short, and numpy's
        per-call overhead on a handful of values would cost more than the arithmetic."""
        values = self.series.get(name)
        if not values:
            return []
        return list(values)[-n:] if n < len(values) else list(values)

    def start(self, name: str) -> float:
        """The median of the series' first values (NaN before any)."""
        values = self.first.get(name)
        return statistics.median(values) if values else math.nan

    def add(self, name: str, value: float) -> None:
        """Add ``value`` to the run total ``name`` (a wall-clock total when ``name`` ends in ``seconds``)."""
        totals = self.clock if name.endswith("seconds") else self.totals
        totals[name] = totals.get(name, 0.0) + float(value)

    def total(self, name: str) -> float:
        """The run total ``name`` (0 before any)."""
        return (self.clock if name.endswith("seconds") else self.totals).get(name, 0.0)

    def state_dict(self) -> dict[str, Any]:
        return {"series": {k: list(v) for k, v in self.series.items()},
                "first": {k: list(v) for k, v in self.first.items()}, "totals": dict(self.totals)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.series = {str(k): deque((float(x) for x in v), maxlen=WINDOW) for k, v in state["series"].items()}
        self.first = {str(k): [float(x) for x in v][:START] for k, v in state["first"].items()}
        self.totals = {str(k): float(v) for k, v in state["totals"].items()}


def theil_sen(values: Sequence[float]) -> tuple[float, float]:
    """Robust trend of equally spaced ``values``: the median of the pairwise slopes (Theil-Sen) and the share of
    pairs that rise minus the share that fall (Kendall's tau, in [-1, 1]); (NaN, NaN) for fewer than 3 values.

    >>> theil_sen([1.0, 2.0, 3.0, 4.0, 20.0])
    (1.0, 1.0)
    """
    n = len(values)
    if n < 3:
        return math.nan, math.nan
    slopes, signs = [], 0
    for i in range(n - 1):
        vi = values[i]
        for j in range(i + 1, n):
            d = values[j] - vi
            slopes.append(d / (j - i))
            signs += (d > 0) - (d < 0)
    return statistics.median(slopes), signs / len(slopes)


def mean(values: Sequence[float]) -> float:
    """The mean (NaN for none)."""
    return sum(values) / len(values) if values else math.nan
