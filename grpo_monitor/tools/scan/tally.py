"""Stuck and saturated questions of a scanned run, with their text.

A question is **stuck** when every group it had (at least ``min_groups``) was degenerate at
the lowest reward the run recorded (for 0/1 rewards: always 0), **saturated** when always
degenerate at the highest, and **constant** when always degenerate at a value in between.
Its text is kept only while it is such a candidate (one that ever shows reward variation
drops it), and the text shown drops the prefix and suffix every question shares (the chat
template, the instruction), so what remains is the question. At most ``cap`` questions are
kept, the least recently seen dropped first: memory does not grow with the steps.

>>> common_prefix("system: be brief. user: 2+2?", "system: be brief. user: 3*3?")
'system: be brief. user: '
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Hashable

import numpy as np

from .groups import StepGroups

TEXT_CHARS = 4_000  # characters kept per candidate question


def common_prefix(a: str, b: str) -> str:
    """The longest common prefix of ``a`` and ``b`` (binary search on slices: C-speed comparisons)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return a[:lo]


def common_suffix(a: str, b: str) -> str:
    """The longest common suffix of ``a`` and ``b``."""
    return common_prefix(a[::-1], b[::-1])[::-1]


def _head_cut(prefix: str) -> int:
    """How much of a shared prefix to drop: up to its last line break (a chat template's ``user\\n``),
    else up to its last whitespace; questions that share their first words keep them.

    >>> _head_cut("system: be brief\\nuser\\nWhat is ")
    22
    """
    cut = prefix.rfind("\n")
    return (cut if cut >= 0 else max(prefix.rfind(" "), prefix.rfind("\t"))) + 1


def _tail_cut(suffix: str) -> int:
    """How much of a shared suffix to drop: from its first line break on (a template's instruction and
    ``assistant`` turn), else from its first whitespace (whole words only).

    >>> _tail_cut("ether?\\nThink step by step.\\nassistant\\n")
    31
    >>> _tail_cut("s? Think step by step.")
    20
    """
    cut = suffix.find("\n")
    if cut < 0:
        starts = [i for i in (suffix.find(" "), suffix.find("\t")) if i >= 0]
        cut = min(starts) if starts else len(suffix)
    return len(suffix) - cut


@dataclasses.dataclass
class QuestionRecord:
    """What a scan knows of one question: groups seen, degenerate ones, the range of their constant reward."""

    groups: int = 0
    degenerate: int = 0
    low: float = math.inf
    high: float = -math.inf
    first_step: int = -1
    last_step: int = -1


@dataclasses.dataclass(frozen=True)
class FlaggedQuestion:
    """A question that never carried signal: ``kind`` is "stuck", "saturated" or "constant"."""

    kind: str
    question_id: Hashable
    text: str
    groups: int
    reward: float
    first_step: int
    last_step: int


def group_ranges(groups: StepGroups) -> tuple[np.ndarray, np.ndarray]:
    """Per group, the min and max of its scorable (non-NaN) rewards (NaN for a group with none)."""
    r = groups.rewards
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN groups give NaN, which is what we want
        if groups.group_ids is None:
            return np.nanmin(r, axis=1), np.nanmax(r, axis=1)
        n = groups.num_groups
        low = np.full(n, np.inf)
        high = np.full(n, -np.inf)
        ok = ~np.isnan(r)
        np.minimum.at(low, groups.group_ids[ok], r[ok])
        np.maximum.at(high, groups.group_ids[ok], r[ok])
        low[np.isinf(low) & (low > 0)] = np.nan
        high[np.isinf(high) & (high < 0)] = np.nan
        return low, high


class QuestionTally:
    """Accumulates per-question degenerate counts over a scan (see the module docstring)."""

    def __init__(self, cap: int = 10_000, min_groups: int = 2):
        self.cap = cap
        self.min_groups = min_groups
        self.records: dict[Hashable, QuestionRecord] = {}
        self.texts: dict[Hashable, str] = {}
        self.reward_low = math.inf
        self.reward_high = -math.inf
        self.prefix: str | None = None
        self.suffix: str | None = None

    def update(self, groups: StepGroups) -> None:
        """Fold one step's groups in (nothing when the rows name no question)."""
        if groups.question_ids is None or groups.num_groups == 0:
            return
        low, high = group_ranges(groups)
        finite = np.isfinite(low)
        if finite.any():
            self.reward_low = min(self.reward_low, float(low[finite].min()))
            self.reward_high = max(self.reward_high, float(high[finite].max()))
        texts = groups.texts or [str(q) for q in groups.question_ids]
        for q, text, lo, hi in zip(groups.question_ids, texts, low.tolist(), high.tolist(), strict=True):
            if lo == lo:  # a group with a scorable row
                self._fold(q, text, groups.step, lo, hi)

    def _fold(self, q: Hashable, text: str, step: int, lo: float, hi: float) -> None:
        record = self.records.pop(q, None)
        if record is None:
            record = QuestionRecord(first_step=step)
            self._new_text(q, text)
        self.records[q] = record  # re-inserted last: the dict's order is least recently seen first
        record.groups += 1
        record.last_step = step
        if lo == hi:
            record.degenerate += 1
            record.low, record.high = min(record.low, lo), max(record.high, lo)
        else:
            self.texts.pop(q, None)
        if len(self.records) > self.cap:
            oldest = next(iter(self.records))
            del self.records[oldest]
            self.texts.pop(oldest, None)

    def _new_text(self, q: Hashable, text: str) -> None:
        self.texts[q] = text[:TEXT_CHARS]
        if self.prefix is None or self.suffix is None:  # the first text (both are set together)
            self.prefix, self.suffix = text, text
        else:
            self.prefix = common_prefix(self.prefix, text)
            self.suffix = common_suffix(self.suffix, text)

    def display(self, q: Hashable, width: int = 70) -> str:
        """The question's distinctive text on one line, cut at ``width`` characters."""
        text = self.texts.get(q, str(q))
        if self.prefix is not None and len(self.records) > 1:
            suffix = self.suffix or ""
            head, tail = _head_cut(self.prefix), _tail_cut(suffix)
            core = text[head:]
            core = core[: len(core) - tail] if tail and core.endswith(suffix[-tail:]) else core
            text = core if core.strip() else text
        line = " ".join(text.split())
        return line if len(line) <= width else line[: width - 1] + "…"

    def flagged(self) -> list[FlaggedQuestion]:
        """Questions that never carried signal, most groups first."""
        out = []
        for q, r in self.records.items():
            if r.groups < self.min_groups or r.degenerate != r.groups:
                continue
            kind = ("stuck" if r.high <= self.reward_low else "saturated" if r.low >= self.reward_high
                    else "constant")
            out.append(FlaggedQuestion(kind, q, self.display(q), r.groups, r.low, r.first_step, r.last_step))
        return sorted(out, key=lambda f: (-f.groups, f.first_step))

    def counts(self) -> dict[str, int]:
        """Questions seen, and how many are stuck, saturated, constant."""
        out = {"questions": len(self.records), "stuck": 0, "saturated": 0, "constant": 0}
        for f in self.flagged():
            out[f.kind] += 1
        return out
