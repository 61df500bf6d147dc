"""One step's recorded rows, as the readers hand them to the grouping: plain columns, no torch.

>>> rows = StepRows(3, "3.jsonl", 1, np.array([1.0, 0.0]), ["q", "q"], ["q", "q"], None)
>>> rows.num_rows
2
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Hashable, Iterator, Sequence
from typing import Any

import numpy as np

from ..reporting.facts import plural
from .columns import ScanInputError, float_column, step_number, where


@dataclasses.dataclass
class StepRows:
    """The rows a trainer recorded for one step.

    ``groups[i]`` is row i's group key (None: consecutive blocks of ``--group-size`` rows);
    ``questions[i]`` its question text or id (None: not recorded); ``line`` the line (or
    row) of the step's first row in ``source``, for messages; ``units`` the progress the
    step stands for (bytes or rows read).
    """

    step: int
    source: str
    line: int
    rewards: np.ndarray
    groups: list[Hashable] | None
    questions: list[Any] | None
    advantages: np.ndarray | None
    units: int = 0
    unit: str = "line"

    @property
    def num_rows(self) -> int:
        return len(self.rewards)

    def where(self) -> str:
        """``"<file>, line <n>"`` of the step's first row."""
        return where(self.source, self.line, self.unit)


def combine_rewards(columns: Sequence[np.ndarray], weights: Sequence[float] | None = None,
                    dtype: Any = np.float64) -> np.ndarray:
    """The weighted sum of several reward columns, as TRL sums its reward functions.

    NaN (``None``) entries are skipped; a row where every column is NaN stays NaN
    (unscorable). ``dtype=np.float32`` reproduces TRL's float32 arithmetic exactly.

    >>> combine_rewards([np.array([1.0, np.nan, np.nan]), np.array([0.5, 2.0, np.nan])]).tolist()
    [1.5, 2.0, nan]
    """
    if len(columns) == 1 and weights is None:
        return columns[0].astype(dtype).astype(np.float64)
    stacked = np.stack([c.astype(dtype) for c in columns], axis=1)
    w = np.ones(len(columns), dtype=dtype) if weights is None else np.asarray(weights, dtype=dtype)
    total = np.nansum(stacked * w, axis=1, dtype=dtype)
    total[np.isnan(stacked).all(axis=1)] = np.nan
    return total.astype(np.float64)


class RowBuffer:
    """Collects the rows of one step from a stream where steps follow one another (JSONL, Parquet).

    Rows of a step must be contiguous and steps must increase; either breach is a worded
    :class:`ScanInputError` naming the file and line. Rows whose step is null (no step
    recorded) are skipped and counted (:attr:`skipped`, :meth:`skipped_note`), never folded
    into a neighbouring step; a step of another type (``true``) is never taken for an equal
    number (``1``).
    """

    def __init__(self, reward_names: Sequence[str], has_group: bool, has_question: bool, has_advantage: bool,
                 unit: str = "line"):
        self.reward_names = tuple(reward_names)
        self.flags = (has_group, has_question, has_advantage)
        self.unit = unit
        self.step: int | None = None
        self.last_done: int | None = None
        self.skipped = 0
        self.first_skipped = ""
        self._reset(None, "", 0)

    def _reset(self, step: int | None, source: str, line: int) -> None:
        self.step, self.source, self.line = step, source, line
        self.rewards: list[list[Any]] = [[] for _ in self.reward_names]
        self.groups: list[Any] = []
        self.questions: list[Any] = []
        self.advantages: list[Any] = []
        self.lines: list[int] = []
        self.units = 0

    def begins(self, raw_step: Any, step_field: str, source: str, line: int) -> StepRows | None:
        """Note that a row of ``raw_step`` comes next; the finished previous step, if this starts a new one."""
        if type(raw_step) is int and raw_step == self.step:  # the common case, without a conversion
            return None
        step = step_number(raw_step, step_field, source, line, self.unit)
        if step == self.step:
            return None
        done = self.finish()
        previous = self.last_done
        if previous is not None and step <= previous:
            again = "appear again" if step == previous else "come"
            raise ScanInputError(
                f"{where(source, line, self.unit)}: rows of step {step} {again} after step {previous}; "
                "the rows of a step must be contiguous and steps must increase: sort the file by step"
            )
        self._reset(step, source, line)
        return done

    def feed(self, batch: dict[str, list[Any]], cols: Any, source: str, lines: Sequence[int],
             units: int) -> Iterator[StepRows]:
        """Add a batch of rows (field -> values; ``lines[i]`` numbers row i); yield each step it completes."""
        steps = batch[cols.step]
        for start, end in runs_of(steps):
            if steps[start] is None:  # rows recorded without a step: counted, never merged into a step
                self.skipped += end - start
                self.first_skipped = self.first_skipped or where(source, lines[start], self.unit)
                continue
            done = self.begins(steps[start], cols.step, source, lines[start])
            if done is not None:
                yield done
            for values, key in zip(self.rewards, cols.reward, strict=False):
                values.extend(batch[key][start:end])
            for flag, into, key in zip(self.flags, (self.groups, self.questions, self.advantages),
                                       (cols.group, cols.question, cols.advantage), strict=True):
                if flag:
                    into.extend(batch[key][start:end])
            self.lines.extend(lines[start:end])
        self.units += units

    def skipped_note(self, field: str) -> str | None:
        """The note on rows skipped for a null step (None when there were none)."""
        if not self.skipped:
            return None
        return (f"{plural(self.skipped, 'row')} with no step ({field!r} is null) skipped, not counted in any step; "
                f"the first at {self.first_skipped}")

    def finish(self) -> StepRows | None:
        """The collected step as :class:`StepRows` (None when empty); the buffer is then empty."""
        if self.step is None or not self.lines:
            return None
        has_group, has_question, has_advantage = self.flags
        src = self.source
        rewards = combine_rewards([float_column(v, n, src, self.lines, self.unit)
                                   for v, n in zip(self.rewards, self.reward_names, strict=True)])
        adv = float_column(self.advantages, "advantage", src, self.lines, self.unit) if has_advantage else None
        rows = StepRows(self.step, src, self.line, rewards, self.groups if has_group else None,
                        self.questions if has_question else None, adv, self.units, self.unit)
        self.last_done = self.step
        self._reset(None, "", 0)
        return rows


def runs_of(values: Sequence[Any]) -> list[tuple[int, int]]:
    """(start, end) of the runs of equal consecutive values.

    >>> runs_of([1, 1, 2, 2, 2, 3])
    [(0, 2), (2, 5), (5, 6)]
    >>> runs_of([1, True, None, None])
    [(0, 1), (1, 2), (2, 4)]
    """
    if not len(values):
        return []
    cuts: Any = None
    types = set(map(type, values))
    if len(types) == 1 and types <= {int, float}:  # numbers of one type: numpy compares them at C speed
        try:
            array = np.asarray(values)
            if array.ndim == 1 and array.dtype.kind in "iuf":
                cuts = (np.flatnonzero(array[1:] != array[:-1]) + 1).tolist()
        except (TypeError, ValueError, OverflowError):
            pass
    if cuts is None:  # a change of type is a new run too: true is not 1, null is not a step
        cuts = [i for i in range(1, len(values))
                if type(values[i]) is not type(values[i - 1]) or values[i] != values[i - 1]]
    bounds = [0, *cuts, len(values)]
    return list(itertools.pairwise(bounds))


#: verl's v1 trainer dumps one uid per row, ``{group uid}_{session}_{index}``.
_ROW_UID = re.compile(r"^(.+)_(\d+)_(\d+)$")


def group_uids(uids: list[Any]) -> list[Any]:
    """``uids`` as group keys: per-row keys of verl's v1 trainer (``{uid}_{session}_{index}``, all
    distinct) lose their two numeric suffixes; anything else is returned as is.

    >>> group_uids(["a_0_0", "a_0_1", "b_0_0"])
    ['a', 'a', 'b']
    >>> group_uids(["a", "a", "b"])
    ['a', 'a', 'b']
    """
    if len(uids) < 2 or len(set(uids)) != len(uids) or not all(isinstance(u, str) for u in uids):
        return uids
    matches = [m for u in uids if (m := _ROW_UID.match(u)) is not None]
    if len(matches) < len(uids):
        return uids
    return [m.group(1) for m in matches]
