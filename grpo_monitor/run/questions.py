"""Per-question view of a step: history, iid-predicted degenerate rate, overdispersion, stuck questions."""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable
from typing import Any

import numpy as np

from ..config import MonitorConfig
from ..step.accumulator import GroupArrays
from ..step.metrics import degenerate_kinds
from .history import QuestionHistory


def filtered_flags(gen_q: list[Hashable], gen_degenerate: np.ndarray, kept_q: list[Hashable]) -> np.ndarray:
    """Which generated groups were discarded: per question, generated minus retained, degenerate first.

    Two dict passes over the groups (C-level ``map``), straight into integer codes; the rest is numpy.
    """
    index = dict(zip(dict.fromkeys(gen_q), itertools.count()))  # first-appearance codes, C-level loops only
    gen_codes = np.fromiter(map(index.__getitem__, gen_q), dtype=np.int64, count=len(gen_q))
    kept_codes = np.fromiter(map(index.get, kept_q, itertools.repeat(-1)), dtype=np.int64, count=len(kept_q))
    m = len(index)
    kept_count = np.bincount(kept_codes[kept_codes >= 0], minlength=m)
    discard = np.maximum(np.bincount(gen_codes, minlength=m) - kept_count, 0)
    order = np.lexsort((~gen_degenerate, gen_codes))
    sorted_codes = gen_codes[order]
    first = np.searchsorted(sorted_codes, sorted_codes, side="left")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order)) - first
    return rank < discard[gen_codes]


def iid_degenerate_rate(n: np.ndarray, pooled: np.ndarray) -> float:
    """Mean over groups of p^n + (1-p)^n with p each question's pooled success rate (binary rewards).

    ``n`` holds each group's scorable rows, ``pooled`` its question's sums
    (:meth:`QuestionHistory.pooled`). Groups without a scorable row or without history are
    left out; NaN when none remains.

    >>> iid_degenerate_rate(np.array([4.0, 4.0]), np.array([[3.0, np.nan], [8.0, np.nan], [2.0, np.nan]]))
    0.17236328125
    """
    s, total, _ = pooled
    keep = (n > 0) & (total > 0)
    if not keep.any():
        return math.nan
    p = s[keep] / total[keep]
    return float(np.mean(p ** n[keep] + (1 - p) ** n[keep]))


def conditional_overdispersion(y: np.ndarray, n: np.ndarray, pooled: np.ndarray) -> float:
    """Intra-group correlation of binary outcomes given each question's pooled success rate.

    A group of ``n`` responses with ``y`` successes, from a question whose pooled history
    holds ``S`` successes in ``N`` responses over ``m >= 2`` groups (p = S/N), contributes
    ``A = (y - n p)^2 / (1 - n/N)`` and ``V = n p (1-p) N/(N-1)``; the estimate is
    ``sum(A - V) / sum((n-1) V)``. For iid responses E[A] = E[V] = n p(1-p), so it is about 0
    whatever the questions' difficulties (unlike a pooled ICC, which counts differences
    between questions as correlation); responses of one group sharing failure modes
    (exchangeable correlation rho) give E[A] = n p(1-p)(1 + (n-1) rho), i.e. about rho.
    A policy that changes over the pooled steps also shows up here. Groups whose question
    has one group in the history, or p in {0, 1}, carry no information; NaN when none remains.
    """
    s, total, groups = pooled
    keep = (n > 0) & (groups >= 2) & (total > n)
    if not keep.any():
        return math.nan
    y, n, s, total = y[keep], n[keep], s[keep], total[keep]
    p = s / total
    a = (y - n * p) ** 2 / (1 - n / total)
    v = n * p * (1 - p) * total / (total - 1)
    den = np.sum((n - 1) * v)
    return float(np.sum(a - v) / den) if den > 0 else math.nan


class QuestionTracker:
    """Feeds :class:`QuestionHistory` once per step and derives the theory-vs-observation metrics."""

    def __init__(self, config: MonitorConfig):
        self.config = config
        self.history = QuestionHistory(config.history_cap, config.stuck_after, config.success_halflife)
        self.binary = True  # every reward folded into the history so far was 0/1 (the iid prediction applies)

    def update(self, step: int, kept: list[GroupArrays], generated: list[GroupArrays],
               binary: bool, reward_range: tuple[float, float] | None = None) -> dict[str, float]:
        """Fold the step's groups with question ids into the history; the per-question metrics of the step.

        ``kept`` are the retained (training) groups, ``generated`` every generated group
        (dynamic sampling); ``binary`` says the step's rewards were all 0/1; ``reward_range`` the
        batch's (lowest, highest) reward, which splits the degenerate groups as
        ``grpo/groups/degenerate_{low,high,other}_rate`` do (None: from the groups themselves).
        """
        kept_cat = _concat([k for k in kept if k.questions is not None])
        gen_cat = _concat([g for g in generated if g.questions is not None])
        cat = gen_cat if gen_cat is not None else kept_cat
        if cat is None:
            return {}
        filtered = np.zeros(len(cat.n), dtype=bool)
        if gen_cat is not None:
            filtered = filtered_flags(_labels(cat), cat.degenerate, _labels(kept_cat) if kept_cat is not None else [])
        keep = np.isfinite(cat.reward_sum)  # an infinite reward is a `finite` breach, kept out of the history
        questions = _labels(cat) if keep.all() else [q for q, k in zip(_labels(cat), keep, strict=True) if k]
        lo, hi = reward_range if reward_range is not None else _value_range(cat)
        kinds = degenerate_kinds(cat.degenerate, cat.reward_sum, cat.n, lo, hi)
        self.history.update(step, questions, cat.reward_sum[keep], cat.n[keep].astype(np.int64), filtered[keep],
                            cat.std[keep], kinds=kinds[keep], truncated=cat.truncated[keep], rows=cat.rows[keep])
        self.binary = self.binary and binary  # pooled success rates mix in every earlier step's rewards
        out: dict[str, float] = {"grpo/sampling/stuck_questions": float(len(self.history.stuck_questions()))}
        if self.binary:
            out.update(self._theory_metrics(cat, kept_cat, gen_cat))
        return out

    def _theory_metrics(self, cat: GroupArrays, kept: GroupArrays | None,
                        generated: GroupArrays | None) -> dict[str, float]:
        """iid-predicted degenerate rates and the overdispersion, from the pooled (run) history.

        ``cat`` is ``generated`` when there is one, else ``kept``.
        """
        pooled = self.history.pooled(_labels(cat))
        out = {"grpo/groups/overdispersion": conditional_overdispersion(cat.reward_sum, cat.n, pooled)}
        if kept is not None:
            kept_pooled = pooled if kept is cat else self.history.pooled(_labels(kept))
            out["grpo/groups/degenerate_rate_iid"] = iid_degenerate_rate(kept.n, kept_pooled)
        if generated is not None:
            out["grpo/sampling/degenerate_rate_iid"] = iid_degenerate_rate(generated.n, pooled)
        return {k: v for k, v in out.items() if not math.isnan(v)}

    def flagged(self) -> list[Hashable]:
        """The stuck questions (see :meth:`QuestionHistory.stuck_questions`)."""
        return self.history.stuck_questions()

    def table(self, limit: int) -> list[dict[str, Any]]:
        """At most ``limit`` per-question rows, most-filtered first."""
        return self.history.table_rows(limit)

    def state_dict(self) -> dict[str, Any]:
        """The history's state and whether every reward so far was binary."""
        return {**self.history.state_dict(), "binary": self.binary}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.history.load_state_dict(state)
        self.binary = bool(state.get("binary", True))


def _concat(records: list[GroupArrays]) -> GroupArrays | None:
    """The records as one (None when there are none)."""
    if len(records) <= 1:
        return records[0] if records else None
    flat = np.concatenate([np.stack([r.std, r.reward_sum, r.n, r.degenerate.astype(float), r.truncated, r.rows])
                           for r in records], axis=1)
    return GroupArrays(flat.reshape(-1), [q for r in records for q in _labels(r)])


def _value_range(arrays: GroupArrays) -> tuple[float, float]:
    """The lowest and highest group mean reward (when no batch range is known); (nan, nan) when none scored."""
    values = arrays.reward_sum[arrays.n > 0] / arrays.n[arrays.n > 0]
    return (float(values.min()), float(values.max())) if len(values) else (math.nan, math.nan)


def _labels(arrays: GroupArrays) -> list[Hashable]:
    """The question ids of records with question ids (the only ones the tracker merges)."""
    if arrays.questions is None:
        raise ValueError("expected per-group arrays with question ids, but got a record without them")
    return arrays.questions
