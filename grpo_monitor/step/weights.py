"""The monitor's loss-weights part (step side): its small accumulator and its step summary.

:class:`LossWeights` keeps what crosses calls: the latest rollout's row -> group map (so
``observe_loss(rows=)`` links a micro-batch's rows to groups on the device), the step's
per-response rows (device tensors, copied to the host once, in the step's sync) and the
reasons already announced for falling back to derived weights. :func:`summarize` turns the
synced rows into the ``grpo/weights/`` metrics and the ``loss_aggregation`` violation (the invariant's
record and wording: :mod:`grpo_monitor.invariants.weights`).
Statistics: :mod:`grpo_monitor.stats.weights`; aggregations: :mod:`grpo_monitor.stats.aggregations`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import warnings
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import torch

from ..invariants import weights as aggregation_check
from ..stats import aggregations as agg
from ..stats.weights import ROW_COLUMNS, WeightRows, checkable_rows, measure_weights, row_records, weight_metrics

log = logging.getLogger("grpo_monitor")


@dataclasses.dataclass(frozen=True)
class RolloutRows:
    """The latest rollout's rows: group of each row, degenerate flag per group, group labels."""

    gid: torch.Tensor
    degenerate: torch.Tensor
    labels: Sequence[Hashable]


class LossWeights:
    """Per-step rows of measured (or derived) token weights, and the reference rollout."""

    def __init__(self) -> None:
        self.reference: RolloutRows | None = None
        self.rows: list[torch.Tensor] = []
        self.announced: set[str] = set()
        self.pending: list[str] = []  # reasons seen inside a trace, announced at the step's end (eagerly)
        self.derive = False  # whether unmeasured weights are derived from a declared aggregation

    def set_reference(self, gid: torch.Tensor, degenerate: torch.Tensor, labels: Sequence[Hashable]) -> None:
        """``observe_rollout``'s rows: ``observe_loss(rows=)`` indexes them."""
        self.reference = RolloutRows(gid, degenerate.to(torch.bool), labels)

    def observe(self, mask: torch.Tensor, tensors: dict[str, torch.Tensor], *, loss: torch.Tensor | None,
                logprobs: torch.Tensor | None, rows: torch.Tensor | None, derive: bool) -> None:
        """One micro-batch: measure ``w`` when ``loss`` is given (else, with ``derive``, leave it to be
        derived from the declared aggregation at the step's end)."""
        adv, self.derive = tensors.get("advantages"), derive
        if adv is None or (loss is None and not derive):
            return
        w = None
        if loss is not None:
            w, why = measure_weights(loss, logprobs)
            if why is not None:
                self.pending.append(why)  # no logging here: inside torch.compile(fullgraph=True) it cannot trace
        group, degenerate, source = self._link(rows, mask.shape[0], mask.device)
        check = checkable_rows(mask, tensors.get("logprobs"), tensors.get("old_logprobs"), tensors.get("ref_logprobs"))
        self.rows.append(row_records(mask, adv, w, micro=len(self.rows), group=group, degenerate=degenerate,
                                     source_row=source, checkable=check,
                                     c_columns=tensors.get("ref_logprobs") is None))  # with a KL term: unchecked

    def _link(self, rows: torch.Tensor | None, b: int, device: torch.device):
        """Group, degenerate flag and rollout row of each loss row (-1/NaN where unknown). No host sync:
        out-of-range indices become unknown instead of an indexing error."""
        ref = self.reference
        if ref is None or (rows is None and b != len(ref.gid)):
            return None, None, None
        idx = rows.to(device) if rows is not None else torch.arange(b, device=device)
        n = len(ref.gid)
        inside = (idx >= 0) & (idx < n)
        safe = idx.clamp(0, max(n - 1, 0))
        group = torch.where(inside, ref.gid.to(device)[safe], -1)
        degenerate = torch.where(inside, ref.degenerate.to(device)[group.clamp(min=0)].double(), math.nan)
        return group, degenerate, torch.where(inside, idx, -1)

    def announce(self) -> None:
        """Say once per reason (at the step's end) that weights fell back to derived ones."""
        pending, self.pending = self.pending, []
        for why in dict.fromkeys(pending):
            self._announce(why)

    def _announce(self, why: str) -> None:
        if why in self.announced:
            return
        self.announced.add(why)
        then = ("using weights derived from the declared loss_aggregation (grpo/weights/measured < 1)" if self.derive
                else "with loss_aggregation='auto' these rows have no weights, so the grpo/weights/ keys that need "
                "them are left out; declare MonitorConfig.loss_aggregation to have them derived")
        text = f"grpo-monitor: loss weights not measured ({why}); {then}"
        log.warning(text)
        warnings.warn(text, RuntimeWarning, stacklevel=4)

    def flat(self) -> torch.Tensor | None:
        """The step's rows as one flat float64 vector for the step's sync; None without rows."""
        self.announce()
        if not self.rows:
            return None
        return torch.cat([r.to(self.rows[0].device) for r in self.rows]).reshape(-1)

    def check(self, flat: torch.Tensor, every_rank: tuple | None, config: Any, step: int) -> WeightsCheck:
        """The ``grpo/weights/`` metrics of the step (over every rank's rows) and the ``loss_aggregation`` check (on
        this rank's rows, against this rank's counts), returned as data: nothing is kept here."""
        ref = self.reference
        summary = summarize(flat.numpy(), config, ref.labels if ref is not None else None, every_rank)
        found = aggregation_check.breach(summary.offending, summary.groups, summary.count, config, step)
        return WeightsCheck(found, summary.metrics, summary.histograms)

    def end_step(self) -> None:
        """The next step starts without rows (the reference rollout stays)."""
        self.rows = []


@dataclasses.dataclass(frozen=True)
class WeightsCheck:
    """What :meth:`LossWeights.check` found: the ``loss_aggregation`` violation (or none), the ``grpo/weights/``
    metrics and histograms for the report."""

    found: list[Any]
    metrics: dict[str, float]
    histograms: dict[str, list[float]]


@dataclasses.dataclass(frozen=True)
class WeightsSummary:
    """The step's ``grpo/weights/`` metrics and the aggregation check's finding (None: no breach)."""

    metrics: dict[str, float]
    histograms: dict[str, list[float]]
    offending: str | None
    groups: tuple = ()
    count: int = 0


def summarize(flat: np.ndarray, config: Any, labels: Sequence[Hashable] | None,
              every_rank: Sequence[np.ndarray | None] | None = None) -> WeightsSummary:
    """Fit and check the aggregation on this rank's rows, derive missing weights, compute the metrics (over
    ``every_rank``'s rows when given: the same values on every rank)."""
    rows = WeightRows(flat)
    tol = config.tolerances.loss_weight_rel
    declared, scope = agg.resolve(config.loss_aggregation, config.loss_scope) \
        if config.loss_aggregation != "auto" else (None, "auto")
    checked = rows.checked().any()
    fit = agg.match(rows, declared, scope, config.loss_normalizer, tol) if declared is not None and checked else None
    offending, groups, count = None, (), 0
    if fit is None:
        fit = agg.fit_aggregation(rows, tol, normalizer=config.loss_normalizer)
        if declared is not None and checked:
            offending, groups, count = _describe(rows, declared, scope, config.loss_normalizer, tol, fit, labels)
    parts = [WeightRows(r) for r in every_rank if r is not None] if every_rank is not None else [rows]
    parts = [p.with_weight(_derived_weight(p, declared, scope, config.loss_normalizer))
             if np.isnan(p.weight).any() else p for p in parts]
    union = _concat(parts, separate_groups=config.rollout_scope == "local")
    metrics = weight_metrics(union)
    name = fit.name if fit is not None else (declared if not checked else None)
    metrics["grpo/weights/aggregation_id"] = agg.aggregation_index(name)
    return WeightsSummary(metrics, weight_histograms(union), offending, groups, count)


def weight_histograms(rows: WeightRows, limit: int = 512) -> dict[str, list[float]]:
    """For the report: live responses' lengths and |weight| / |A| (aligned, at most ``limit``, evenly strided,
    scaled to mean 1), and the per-question shares of |weight| when rows are linked to groups."""
    live = (np.abs(rows.advantage) > 0) & (rows.length > 0) & (rows.weight > 0)
    out: dict[str, list[float]] = {}
    if live.any():
        per_adv = rows.weight[live] / np.abs(rows.advantage[live])
        stride = max(1, -(-int(live.sum()) // limit))
        out["grpo/weights/response_length"] = rows.length[live][::stride].tolist()
        out["grpo/weights/response_weight"] = (per_adv / per_adv.mean())[::stride].tolist()
    total = float(np.nansum(rows.weight))
    if total > 0 and len(rows) and (rows.group >= 0).all():
        shares = np.bincount(rows.group.astype(np.int64), weights=rows.weight / total)
        out["grpo/weights/question_share"] = shares[shares > 0][:limit].tolist()
    return out


def _concat(parts: Sequence[WeightRows], separate_groups: bool = False) -> WeightRows:
    """Every rank's rows as one table, micro-batches numbered apart (rank r's after rank r-1's). With
    ``separate_groups`` (local rollout scope: each rank's group ids index its own shard) the groups too; under
    global scope every rank's ids index the same gathered rollout and are kept."""
    if len(parts) == 1:
        return parts[0]  # one table: numbered from 0 already, nothing to shift
    tables, offset, group_offset = [], 0.0, 0.0
    micro, group = ROW_COLUMNS.index("micro"), ROW_COLUMNS.index("group")
    for p in parts:
        t = p.table.copy()
        t[:, micro] += offset
        offset = float(t[:, micro].max()) + 1 if len(t) else offset
        if separate_groups and len(t):
            linked = t[:, group] >= 0
            t[linked, group] += group_offset
            group_offset = max(group_offset, float(t[:, group].max()) + 1)
        tables.append(t)
    return WeightRows(np.concatenate(tables) if tables else np.zeros((0, len(ROW_COLUMNS))))


def _derived_weight(rows: WeightRows, declared: str | None, scope: str, normalizer: float | None) -> np.ndarray:
    """Sum of |w| per row the declared aggregation gives (NaN without a declared aggregation)."""
    if declared is None:
        return np.full(len(rows), np.nan)
    d = agg.denominators(declared, "micro_batch" if scope == "auto" else scope, rows,
                         normalizer if normalizer is not None else 1.0)[0]
    per_length = agg.AGGREGATIONS[declared].per_length
    return np.abs(rows.advantage) * rows.length / (d * (np.maximum(rows.length, 1) if per_length else 1.0))


def _describe(rows: WeightRows, declared: str, scope: str, normalizer: float | None, tol: float,
              fit: agg.Fit | None, labels: Sequence[Hashable] | None) -> tuple[str, tuple, int]:
    """The first offending rows with their measured and expected per-token weights."""
    where, expected, count = agg.offending_rows(rows, declared, scope, normalizer, tol)
    return aggregation_check.describe(rows, where, expected, count, declared, scope, fit, labels)


__all__ = ["ROW_COLUMNS", "LossWeights", "WeightsCheck", "WeightsSummary", "summarize"]
