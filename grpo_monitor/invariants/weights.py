"""``loss_aggregation``, the check on gathered rows: each response's measured per-token loss weight against the
declared aggregation's. The rows and the aggregations' arithmetic are :mod:`grpo_monitor.stats.weights` and
:mod:`grpo_monitor.stats.aggregations`; :func:`grpo_monitor.step.weights.summarize` finds the offending rows,
:func:`describe` words them.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from .record import Invariant, MonitorConfig, Violation, violation


def _expected(cfg: MonitorConfig) -> str:
    scope = "" if cfg.loss_scope == "auto" else f", {cfg.loss_scope} scope"
    return (f"per-token weights of loss_aggregation={cfg.loss_aggregation!r}{scope} within "
            f"{cfg.tolerances.loss_weight_rel:g} relative")


RECORDS: tuple[Invariant, ...] = (
    Invariant("loss_aggregation", "at ratio 1 without a KL term, every token's loss weight dloss/dlogprob is "
              "-A c with c the declared loss aggregation's (per micro-batch or per optimizer step)",
              "the loss divides by another count than declared: per-row lengths under a constant normaliser, the "
              "micro-batch's tokens instead of the step's, gradient accumulation not divided out, or an extra "
              "per-token factor", "tokens", "loss_weight_rel", "error", _expected),
)


def describe(rows: Any, where: np.ndarray, expected: np.ndarray, count: int, declared: str, scope: str,
             fit: Any, labels: Sequence[Hashable] | None) -> tuple[str, tuple, int]:
    """The first offending rows (``where``, of :class:`~grpo_monitor.stats.weights.WeightRows` ``rows``) with
    their measured and ``expected`` per-token weights; ``fit``: the aggregation the weights follow, or None."""
    parts = []
    for i, c_exp in zip(where.tolist(), expected.tolist(), strict=True):
        a = rows.advantage[i]
        src = int(rows.source_row[i])
        parts.append(
            f"micro-batch {int(rows.micro[i])} row {int(rows.row[i])}"
            + (f" (rollout row {src})" if src >= 0 else "")
            + f", {int(rows.length[i])} tokens, advantage {a:.4g}: measured w {-a * rows.c_mean[i]:.6g} per token "
            f"(range {-a * rows.c_max[i]:.6g}..{-a * rows.c_min[i]:.6g}), expected {-a * c_exp:.6g}")
    found = f"; the weights follow {fit.name} ({fit.scope} scope)" if fit is not None else \
        "; no listed aggregation fits them"
    text = f"{count} of {int(rows.checked().sum())} checked rows off {declared} ({scope}): " + "; ".join(parts) + found
    groups: tuple = ()
    if labels is not None:
        gids = [int(rows.group[i]) for i in where.tolist() if rows.group[i] >= 0]
        groups = tuple(labels[g] for g in dict.fromkeys(gids) if g < len(labels))
    return text, groups, count


def breach(offending: str | None, groups: tuple, count: int, config: MonitorConfig, step: int) -> list[Violation]:
    """The step's ``loss_aggregation`` violation (none when ``offending`` is None)."""
    if offending is None:
        return []
    return [violation("loss_aggregation", step, offending, config, groups, count=count)]
