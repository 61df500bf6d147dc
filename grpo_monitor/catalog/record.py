"""One catalogue entry (:class:`Metric`), its constructor and the aggregation phrases the entries share.

The records live in :mod:`grpo_monitor.catalog.metrics` (``METRICS``), the ``*_metrics.py`` modules
and the families' modules (``family_*.py``); all build them from here.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

Kind = Literal["scalar", "histogram", "table", "text"]
Source = Literal["observe_rollout", "observe_generation", "observe_loss", "end_step", "integration"]
KINDS: tuple[str, ...] = ("scalar", "histogram", "table", "text")
SOURCES: tuple[str, ...] = ("observe_rollout", "observe_generation", "observe_loss", "end_step", "integration")


@dataclasses.dataclass(frozen=True)
class Metric:
    """One emitted key.

    ``source`` is the call whose inputs produce it (``needs``: which of its optional
    arguments); ``aggregation`` how micro-batches and ranks combine within a step;
    ``over_steps`` how to combine several steps; ``summary`` the dashboards' run summary
    (``"last"`` or ``"max"``); ``panel`` the title of a chart shared with related keys;
    ``only_when`` why the key can be absent even when every input is given ("" if never);
    ``constant`` the value the key takes at every step by definition (tables leave it out), else None;
    ``alias_of`` the current key when this one is its older name (emitted beside it, same value).
    """

    key: str
    section: str
    source: Source
    unit: str
    aggregation: str
    over_steps: str
    meaning: str
    kind: Kind = "scalar"
    needs: str = ""
    summary: Literal["last", "max"] = "last"
    panel: str | None = None
    only_when: str = ""
    constant: float | None = None
    alias_of: str | None = None


# How values combine within a step (micro-batches, ranks) ---------------------------------
SUM = "sum over micro-batches and ranks"
RATIO = "ratio of sums over micro-batches and ranks, computed after the sync"
MAX = "max over micro-batches and ranks"
MOMENTS = "from counts, sums and sums of squares summed over micro-batches and ranks"
HISTORY = "after the sync, from the per-question history (the union of the ranks' groups)"
FIT = "fitted after the sync from the summed per-group statistics"
RUN = "running sum of the synced per-step counts (kept across resume)"
ROWS = "every rank's values, gathered at the end of the step"
CHECKS = "breaches found by the step's checks, which run on the synced statistics"


def metric(key: str, unit: str, aggregation: str, over_steps: str, meaning: str, **kw) -> Metric:
    """An entry of the section and source in ``kw`` (filled in by the section lists below)."""
    return Metric(key=key, unit=unit, aggregation=aggregation, over_steps=over_steps, meaning=meaning, **kw)
