"""Segments of a run's log: where its steps go back, and what the report then says.

One writer appends one full record per step, steps increasing (a step may get extra
partial records from ``JSONLSink.log``: ``{"step", "metrics"}``, no ``"failed"``). Steps go
back when a run is resumed from an earlier checkpoint into the same log (the breach that
stopped it stays in the file, before the resumed steps) or when two processes write to one
log (steps alternate). Each full record whose step is not above the previous full record's
starts a segment. The figures
keep each step's last record; the report keeps the violations of every record and says so.

>>> [s.steps for s in find_segments([{"step": s, "failed": False} for s in (0, 1, 2, 1, 2, 3)])]
[(0, 2), (1, 3)]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from .numbers import plural


@dataclasses.dataclass(frozen=True)
class Segment:
    """Full records ``first`` to ``last`` (0-based, in file order) of one run of increasing steps."""

    first: int
    last: int
    steps: tuple[int, int]
    failed: tuple[int, ...] = ()  # steps of this segment whose record stopped the run


def _full(record: dict[str, Any]) -> bool:
    """A whole step report (``StepReport.to_dict()``), not a partial ``{"step", "metrics"}`` record."""
    return "failed" in record or "violations" in record


def find_segments(records: Sequence[dict[str, Any]]) -> list[Segment]:
    """The segments of checked step records in file order (one when the steps never go back)."""
    out: list[Segment] = []
    start: int | None = None
    steps: list[int] = []
    failed: list[int] = []
    for index, record in enumerate(records):
        if not _full(record):
            continue
        step = record["step"]
        if steps and step <= steps[-1] and start is not None:  # a whole report of a step already reported
            out.append(Segment(start, index - 1, (steps[0], steps[-1]), tuple(failed)))
            steps, failed = [], []
        if not steps:
            start = index
        steps.append(step)
        failed += [step] if record.get("failed") else []
    if start is not None and steps:
        out.append(Segment(start, len(records) - 1, (steps[0], steps[-1]), tuple(failed)))
    return out


def _span(segment: Segment) -> str:
    a, b = segment.steps
    stopped = f", stopped by a breach at step {segment.failed[0]}" if segment.failed else ""
    return (f"step {a}" if a == b else f"steps {a}-{b}") + stopped


def segments_note(segments: Sequence[Segment], repeated: int, earlier_violations: int) -> str:
    """What the report did with a log whose steps go back ('' for a log of one segment)."""
    if len(segments) < 2:
        return ""
    short = sum(s.steps[1] - s.steps[0] <= 1 for s in segments)
    if len(segments) > 3 and short * 2 > len(segments):
        what = (f"its steps go back {len(segments) - 1} times, mostly by one step: more than one process writes "
                "to this log (two runs sharing one output folder?), so its steps mix their records")
    else:
        spans = "; then ".join(_span(s) for s in segments)
        what = (f"it holds {len(segments)} segments whose steps overlap: {spans} (a run resumed from an earlier "
                "checkpoint into the same log, or a second writer)")
    kept = (f"; the violations of every record are kept ({plural(earlier_violations, 'violation')} from records "
            "a later one of the same step replaced)" if earlier_violations else
            "; the violations of every record are kept")
    return (f"This log is not one run of increasing steps: {what}. {plural(repeated, 'step')} appear more than once: "
            f"the figures and tables show each step's last record{kept}.")
