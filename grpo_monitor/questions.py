"""Per-question view of a step: history, iid-predicted degenerate rate, overdispersion, stuck questions."""

from __future__ import annotations

import math
from typing import Any, Hashable, Sequence

import numpy as np

from .config import MonitorConfig
from .history import QuestionHistory, intra_group_correlation


class GroupArrays:
    """Host copies of one record's per-group arrays (std, reward sum, valid count, degenerate)."""

    def __init__(self, flat: np.ndarray, questions: Sequence[Hashable] | None):
        std, rsum, n, degen = flat.reshape(4, -1)
        self.std, self.reward_sum, self.n, self.degenerate = std, rsum, n, degen.astype(bool)
        self.questions = list(questions) if questions is not None else None


def split_arrays(flat: np.ndarray, sizes: Sequence[int], questions: Sequence[Any]) -> list[GroupArrays]:
    """Cut the step's concatenated per-group arrays back into records."""
    out, offset = [], 0
    for size, q in zip(sizes, questions):
        out.append(GroupArrays(flat[offset:offset + 4 * size], q))
        offset += 4 * size
    return out


def filtered_flags(gen_q: list[Hashable], gen_degenerate: np.ndarray, kept_q: list[Hashable]) -> np.ndarray:
    """Which generated groups were discarded: per question, generated minus retained, degenerate first."""
    index: dict[Hashable, int] = {}
    gen_codes = np.array([index.setdefault(q, len(index)) for q in gen_q], dtype=np.int64)
    kept_codes = np.array([index[q] for q in kept_q if q in index], dtype=np.int64)
    m = len(index)
    discard = np.maximum(np.bincount(gen_codes, minlength=m) - np.bincount(kept_codes, minlength=m), 0)
    order = np.lexsort((~gen_degenerate, gen_codes))
    sorted_codes = gen_codes[order]
    first = np.searchsorted(sorted_codes, sorted_codes, side="left")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order)) - first
    return rank < discard[gen_codes]


class QuestionTracker:
    """Feeds :class:`QuestionHistory` once per step and derives the theory-vs-observation metrics."""

    def __init__(self, config: MonitorConfig):
        self.config = config
        self.history = QuestionHistory(config.history_cap, config.stuck_after)

    def update(self, step: int, kept: list[GroupArrays], generated: list[GroupArrays], binary: bool) -> dict[str, float]:
        kept = [k for k in kept if k.questions is not None]
        generated = [g for g in generated if g.questions is not None]
        source = generated or kept
        if not source:
            return {}
        cat = _concat(source)
        filtered = np.zeros(len(cat.n), dtype=bool)
        if generated:
            filtered = filtered_flags(cat.questions, cat.degenerate, _concat(kept).questions if kept else [])
        self.history.update(step, cat.questions, cat.reward_sum, cat.n.astype(np.int64), filtered, cat.std)
        out: dict[str, float] = {"grpo/sampling/stuck_questions": float(len(self.history.stuck_questions()))}
        if binary:
            out.update(self._theory_metrics(kept, generated, cat))
        return out

    def _theory_metrics(self, kept, generated, cat: GroupArrays) -> dict[str, float]:
        out = {"grpo/groups/overdispersion": _nan_to_none(intra_group_correlation(cat.reward_sum, cat.n))}
        if kept:
            k = _concat(kept)
            out["grpo/groups/degenerate_rate_iid"] = self.history.iid_degenerate_rate(k.questions, k.n.astype(np.int64))
        if generated:
            out["grpo/sampling/degenerate_rate_iid"] = self.history.iid_degenerate_rate(cat.questions, cat.n.astype(np.int64))
        return {k: v for k, v in out.items() if v is not None and not math.isnan(v)}

    def flagged(self) -> list[Hashable]:
        return self.history.stuck_questions()

    def table(self, limit: int) -> list[dict[str, Any]]:
        return self.history.table_rows(limit)

    def state_dict(self) -> dict[str, Any]:
        return self.history.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history.load_state_dict(state)


def _concat(records: list[GroupArrays]) -> GroupArrays:
    flat = np.concatenate([np.stack([r.std, r.reward_sum, r.n, r.degenerate.astype(float)]) for r in records], axis=1)
    return GroupArrays(flat.reshape(-1), [q for r in records for q in r.questions])


def _nan_to_none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)
