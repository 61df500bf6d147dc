"""Per-question history across steps, and the intra-group correlation of binary outcomes.

``QuestionHistory`` is fed once per step with per-group arrays already on the host. Its
per-step work has no Python loop over responses: per-question sums come from one
``np.bincount`` each (none when every question has one group: the sums are the values), then one
short loop over the step's distinct questions updates the bounded dict (least-recently-seen questions
are evicted beyond ``cap``).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from .question_sums import QuestionSums


def intra_group_correlation(successes: np.ndarray, counts: np.ndarray) -> float:
    """ANOVA (Fleiss) estimate of the intra-class correlation of binary outcomes in groups.

    With ``k`` groups of sizes ``n_i`` holding ``y_i`` successes, ``N = sum n_i``:
    ``MSB = (sum y_i^2/n_i - (sum y_i)^2/N) / (k-1)``, ``MSW = (sum y_i - sum y_i^2/n_i) / (N-k)``,
    ``n0 = (N - sum n_i^2/N) / (k-1)`` and ``rho = (MSB - MSW) / (MSB + (n0-1) MSW)``.
    About 0 for iid Bernoulli groups, about ``rho`` for beta-binomial groups (rollouts of
    one prompt sharing failure modes), at least ``-1/(n0-1)``. Empty groups are ignored;
    NaN when fewer than two groups remain or no outcome varies.

    >>> intra_group_correlation(np.array([0, 4, 0, 4]), np.array([4, 4, 4, 4]))
    1.0
    >>> intra_group_correlation(np.array([2, 2, 2, 2]), np.array([4, 4, 4, 4]))
    -0.3333333333333333
    """
    y, n = _check_groups(successes, counts)
    keep = n > 0
    y, n = y[keep], n[keep]
    k, total = len(n), n.sum()
    if k < 2 or total <= k:
        return math.nan
    between_sq = np.sum(y * y / n)
    msb = (between_sq - y.sum() ** 2 / total) / (k - 1)
    msw = (y.sum() - between_sq) / (total - k)
    n0 = (total - np.sum(n * n) / total) / (k - 1)
    denominator = msb + (n0 - 1) * msw
    return math.nan if denominator <= 0 else float((msb - msw) / denominator)


def _check_groups(successes: Any, counts: Any) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(successes, dtype=np.float64).reshape(-1)
    n = np.asarray(counts, dtype=np.float64).reshape(-1)
    if y.shape != n.shape:
        raise ValueError(f"successes has shape {y.shape} but counts has shape {n.shape}; pass one entry per group")
    _check_counts(n)
    if not (np.isfinite(y).all() and (y >= 0).all() and (y <= n).all()):
        raise ValueError(f"Expected argument `successes` to lie in [0, counts] per group but got {y.tolist()}")
    return y, n


def _check_counts(n: np.ndarray) -> np.ndarray:
    if not (np.isfinite(n).all() and (n >= 0).all() and (n == np.round(n)).all()):
        raise ValueError(f"Expected argument `counts` to hold integers >= 0 but got {n.tolist()}")
    return n


@dataclasses.dataclass
class _Record:
    """What is kept about one question (sums and counts, never means)."""

    times_seen: int = 0
    times_filtered: int = 0
    success_sum: float = 0.0
    response_count: int = 0
    last_reward_std: float = math.nan
    stuck_streak: int = 0
    last_step: int = -1
    recent_success: float = 0.0  # success_sum, response_count and times_seen with older
    recent_count: float = 0.0  # steps down-weighted by the history's half-life
    recent_groups: float = 0.0
    degenerate_low: int = 0  # degenerate groups by kind (step.metrics.degenerate_kinds): every row at the
    degenerate_high: int = 0  # batch's lowest reward (unsolved), at its highest (solved), anything else
    degenerate_other: int = 0
    truncated_rows: int = 0  # rows cut at the length limit, out of the rows whose truncation was given
    truncation_rows: int = 0
    degenerate_truncated: int = 0  # degenerate groups whose rows were all cut


_FIELDS = tuple(f.name for f in dataclasses.fields(_Record))


class QuestionHistory:
    """Bounded per-question history: success rate, filtering and stuck questions.

    ``times_seen`` and ``times_filtered`` count groups (attempts); the stuck streak counts
    consecutive steps *in which the question appears* and every one of its groups was
    filtered (steps without it neither extend nor break the streak).

    >>> h = QuestionHistory(cap=2, stuck_after=1)
    >>> h.update(0, ["a", "b"], np.array([0, 3]), np.array([4, 4]), np.array([True, False]), np.array([0.0, 0.43]))
    >>> h.success_rate("b"), h.stuck_questions()
    (0.75, ['a'])
    """

    def __init__(self, cap: int, stuck_after: int, halflife: float | None = None) -> None:
        for name, value in (("cap", cap), ("stuck_after", stuck_after)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Expected argument `{name}` to be an int >= 1 but got {value!r}")
        if halflife is not None and not halflife > 0:
            raise ValueError(f"Expected argument `halflife` to be None or a number > 0 but got {halflife!r}")
        self.halflife = halflife
        self.cap = cap
        self.stuck_after = stuck_after
        self._records: OrderedDict[Hashable, _Record] = OrderedDict()
        self._stuck: OrderedDict[Hashable, None] = OrderedDict()  # stuck ids, in the records' order
        self._last_step: int | None = None
        self._classes: Counter[tuple[str, bool]] = Counter()  # (supply class, seen twice or more) -> questions
        self.touched: dict[Hashable, str] = {}  # the supply class of each question the last update folded

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, question_id: Hashable) -> bool:
        return question_id in self._records

    def update(
        self,
        step: int,
        question_ids: Sequence[Hashable],
        successes: np.ndarray,
        counts: np.ndarray,
        filtered: np.ndarray,
        reward_std: np.ndarray,
        kinds: np.ndarray | None = None,
        truncated: np.ndarray | None = None,
        rows: np.ndarray | None = None,
    ) -> None:
        """Fold one step's groups in: one entry per group in every argument.

        ``successes`` is the number of reward-1 rows (or the reward sum), ``counts`` the
        valid rows, ``filtered`` whether dynamic sampling discarded the group; optional:
        ``kinds`` the degenerate split (``step.metrics.degenerate_kinds`` codes), ``truncated``
        the group's rows cut at the length limit (NaN where not given) out of its ``rows``
        (all rows, scorable or not; ``counts`` when omitted).
        """
        step = self._check_step(step)
        self.touched = {}
        codes, unique = _encode(question_ids)
        y, n, dropped, stds = _check_update(len(codes), successes, counts, filtered, reward_std)
        m = len(unique)
        per_question = QuestionSums(codes, m)
        seen = per_question.count()
        n_filtered = per_question.sums(dropped).astype(np.int64)
        success_sums = per_question.sums(y)
        response_counts = per_question.sums(n).astype(np.int64)
        last_group = per_question.last()
        all_rows = _optional(rows, len(codes), "rows")
        split = _split_counts(per_question, _optional(kinds, len(codes), "kinds"),
                              _optional(truncated, len(codes), "truncated"), n if all_rows is None else all_rows)
        items = zip(unique, seen.tolist(), n_filtered.tolist(), success_sums.tolist(),
                    response_counts.tolist(), stds[last_group].tolist(), split.T.tolist(), strict=True)
        for qid, n_seen, n_drop, s_sum, r_count, std, counts_ in items:  # one pass over distinct questions
            self._fold(qid, step, n_seen, n_drop, s_sum, r_count, std, counts_)
        while len(self._records) > self.cap:
            evicted, old = self._records.popitem(last=False)
            self._stuck.pop(evicted, None)
            self._classes[_supply_class(old)] -= 1
            self.touched.pop(evicted, None)

    def _check_step(self, step: Any) -> int:
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise ValueError(f"Expected argument `step` to be an int but got {step!r}")
        if self._last_step is not None and step < self._last_step:
            raise ValueError(f"Expected argument `step` to be >= the last step {self._last_step} but got {step}")
        self._last_step = int(step)
        return int(step)

    def _fold(self, qid: Hashable, step: int, seen: int, dropped: int, s_sum: float, r_count: int, std: float,
              split: list[float]) -> None:
        record = self._records.pop(qid, None) or _Record()
        if record.times_seen:
            self._classes[_supply_class(record)] -= 1
        low, high, other, cut, cut_rows, all_cut = split  # _SPLIT_FIELDS, in order
        record.degenerate_low += int(low)
        record.degenerate_high += int(high)
        record.degenerate_other += int(other)
        record.truncated_rows += int(cut)
        record.truncation_rows += int(cut_rows)
        record.degenerate_truncated += int(all_cut)
        all_filtered = dropped == seen
        if record.last_step == step:  # a second batch of the same step: only a kept group breaks the streak
            record.stuck_streak = record.stuck_streak if all_filtered else 0
        else:
            record.stuck_streak = record.stuck_streak + 1 if all_filtered else 0
        record.times_seen += seen
        record.times_filtered += dropped
        record.success_sum += s_sum
        record.response_count += r_count
        decay = 0.5 ** ((step - record.last_step) / self.halflife) if self.halflife and record.last_step >= 0 else 1.0
        record.recent_success = record.recent_success * decay + s_sum
        record.recent_count = record.recent_count * decay + r_count
        record.recent_groups = record.recent_groups * decay + seen
        record.last_reward_std = std
        record.last_step = step
        self._records[qid] = record  # most recently seen last
        kind = _supply_class(record)
        self._classes[kind] += 1
        self.touched[qid] = kind[0]
        self._stuck.pop(qid, None)
        if record.stuck_streak >= self.stuck_after:
            self._stuck[qid] = None  # kept incrementally: no per-step scan of the whole history

    def success_rate(self, question_id: Hashable) -> float:
        """Pooled success rate (mean reward) of a question; NaN before any valid response."""
        record = self._records.get(question_id)
        if record is None:
            raise KeyError(f"question {question_id!r} has no history (never seen, or evicted beyond cap={self.cap})")
        return record.success_sum / record.response_count if record.response_count else math.nan

    def pooled(self, question_ids: Sequence[Hashable]) -> np.ndarray:
        """Per entry of ``question_ids``, its pooled (success sum, responses, groups); NaN when absent.

        With a half-life, the sums weigh older steps down (a learning policy's success rate
        moves; a run-long pool would lag it). Sums and counts, never means; shape
        ``(3, len(question_ids))``, one dict lookup per entry.

        >>> h = QuestionHistory(cap=4, stuck_after=1)
        >>> h.update(0, ["a", "a"], np.array([1, 3]), np.array([4, 4]), np.array([False, False]), np.zeros(2))
        >>> h.pooled(["a", "b"]).tolist()
        [[4.0, nan], [8.0, nan], [2.0, nan]]
        """
        absent = (math.nan, math.nan, math.nan)
        records = map(self._records.get, question_ids)
        if self.halflife is not None:
            rows = [absent if r is None else (r.recent_success, r.recent_count, r.recent_groups) for r in records]
        else:
            rows = [absent if r is None else (r.success_sum, r.response_count, r.times_seen) for r in records]
        return np.array(rows, dtype=np.float64).reshape(-1, 3).T  # one array built, no per-entry assignment

    def supply(self) -> dict[str, int]:
        """Questions per supply class (:func:`_supply_class`), and among those seen twice or more; kept
        incrementally, so reading it costs nothing per question."""
        c = self._classes
        out = {name: c[(name, False)] + c[(name, True)] for name in SUPPLY_CLASSES}
        out.update({f"repeated_{name}": c[(name, True)] for name in SUPPLY_CLASSES})
        return out

    def classes(self) -> dict[Hashable, str]:
        """Every tracked question's supply class (one pass over the history)."""
        return {qid: _supply_class(r)[0] for qid, r in self._records.items()}

    def stuck_questions(self) -> list[Hashable]:
        """Questions filtered in every attempt for at least ``stuck_after`` consecutive steps."""
        return list(self._stuck)

    def table_rows(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Per-question rows for a table, most-filtered first (ties: most recently seen first)."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ValueError(f"Expected argument `limit` to be None or an int >= 0 but got {limit!r}")
        items = list(self._records.items())
        filtered = np.fromiter((r.times_filtered for _, r in items), dtype=np.int64, count=len(items))
        recency = np.arange(len(items))  # most recently seen last
        chosen = np.lexsort((-recency, -filtered))[:limit]  # one vectorised sort: no Python key per question
        return [_row(*items[i]) for i in chosen.tolist()]

    def state_dict(self) -> dict[str, Any]:
        """Plain Python state (JSON and ``torch.save`` friendly), questions oldest first."""
        return {
            "cap": self.cap,
            "stuck_after": self.stuck_after,
            "halflife": self.halflife,
            "last_step": self._last_step,
            "questions": [[qid, *dataclasses.astuple(r)] for qid, r in self._records.items()],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()`` exactly (JSON turns tuple ids into lists; they come back as tuples)."""
        missing = {"cap", "stuck_after", "last_step", "questions"} - set(state)
        if missing:
            raise KeyError(f"history state lacks {sorted(missing)}; pass the dict state_dict() returned")
        restored = QuestionHistory(state["cap"], state["stuck_after"], state.get("halflife"))
        for qid, *values in state["questions"]:
            restored._records[_hashable(qid)] = _Record(**dict(zip(_FIELDS, values, strict=False)))
        self.cap, self.stuck_after, self.halflife = restored.cap, restored.stuck_after, restored.halflife
        self._records, self._last_step = restored._records, state["last_step"]
        self._stuck = OrderedDict((q, None) for q, r in self._records.items() if r.stuck_streak >= self.stuck_after)
        self._classes = Counter(_supply_class(r) for r in self._records.values() if r.times_seen)
        self.touched = {}


#: A question's class across its sightings: every group all at the batch's top reward, all at its bottom, other.
SUPPLY_CLASSES = ("saturated", "unsolved", "learnable")


def _supply_class(record: _Record) -> tuple[str, bool]:
    """(class, seen twice or more) of a record."""
    seen = record.times_seen
    name = ("saturated" if record.degenerate_high == seen else "unsolved" if record.degenerate_low == seen
            else "learnable")
    return name, seen >= 2


def _row(question_id: Hashable, record: _Record) -> dict[str, Any]:
    rate = record.success_sum / record.response_count if record.response_count else math.nan
    row = {
        "question_id": question_id,
        "success_rate": rate,
        "reward_std": record.last_reward_std,
        "times_seen": record.times_seen,
        "times_filtered": record.times_filtered,
        "degenerate_low": record.degenerate_low,
        "degenerate_high": record.degenerate_high,
        "degenerate_other": record.degenerate_other,
    }
    if record.truncation_rows:  # only for questions whose truncation was given
        row.update(truncated_rate=record.truncated_rows / record.truncation_rows,
                   degenerate_truncated=record.degenerate_truncated)
    return row


#: The split counters of a record, in the order :func:`_split_counts` returns them.
_SPLIT_FIELDS = ("degenerate_low", "degenerate_high", "degenerate_other", "truncated_rows", "truncation_rows",
                 "degenerate_truncated")


def _optional(values: Any, n_groups: int, name: str) -> np.ndarray | None:
    if values is None:
        return None
    array = np.asarray(values, dtype=np.float64).reshape(-1)
    if array.shape != (n_groups,):
        raise ValueError(f"{name} has shape {array.shape} but question_ids has {n_groups} entries; pass one entry "
                         "per group")
    return array


def _split_counts(per_question: QuestionSums, kinds: np.ndarray | None, truncated: np.ndarray | None,
                  rows: np.ndarray) -> np.ndarray:
    """Per distinct question, the ``_SPLIT_FIELDS`` counts of the step, shape ``(6, m)`` (one sum each)."""
    out = np.zeros((len(_SPLIT_FIELDS), per_question.m))
    if kinds is not None:
        for i, code in enumerate((1, 2, 3)):  # DEGENERATE_LOW, _HIGH, _OTHER of step.metrics
            out[i] = per_question.sums(kinds == code)
    if truncated is not None:
        given = ~np.isnan(truncated)
        out[3] = per_question.sums(np.where(given, truncated, 0.0))
        out[4] = per_question.sums(np.where(given, rows, 0.0))
        if kinds is not None:
            all_cut = given & (kinds > 0) & (truncated >= rows) & (rows > 0)
            out[5] = per_question.sums(all_cut)
    return out


def _hashable(value: Any) -> Hashable:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def _encode(question_ids: Sequence[Hashable]) -> tuple[np.ndarray, list[Hashable]]:
    """Integer codes of the ids (first-appearance order) and the distinct ids."""
    index: dict[Hashable, int] = {}
    codes = [index.setdefault(q, len(index)) for q in question_ids]  # one pass over groups
    return np.asarray(codes, dtype=np.int64), list(index)


def _check_update(n_groups: int, successes: Any, counts: Any, filtered: Any, reward_std: Any):
    arrays = {"successes": successes, "counts": counts, "filtered": filtered, "reward_std": reward_std}
    arrays = {k: np.asarray(v).reshape(-1) for k, v in arrays.items()}
    for name, array in arrays.items():
        if array.shape != (n_groups,):
            raise ValueError(
                f"{name} has shape {array.shape} but question_ids has {n_groups} entries; pass one entry per group"
            )
    n = _check_counts(arrays["counts"].astype(np.float64))
    y = arrays["successes"].astype(np.float64)
    if not np.isfinite(y).all():
        raise ValueError(f"Expected argument `successes` to be finite but got {y.tolist()}")
    if arrays["filtered"].dtype != np.bool_:
        raise ValueError(f"Expected argument `filtered` to be a bool array but got dtype {arrays['filtered'].dtype}")
    return y, n, arrays["filtered"].astype(np.float64), arrays["reward_std"].astype(np.float64)
