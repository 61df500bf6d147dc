"""What the loss does with the advantages: per-token weights ``w = dloss/dlogprobs``, per row.

Device side (no host sync): :func:`measure_weights` takes ``w`` from autograd without
touching any ``.grad``; :func:`row_records` reduces a micro-batch to one float64 row of
:data:`ROW_COLUMNS` per response. Host side, after the step's one sync:
:class:`WeightRows` holds the step's rows and :func:`weight_metrics` the ``grpo/weights/``
family (exact sums over the step's rows). Fit and check of the aggregation:
:mod:`grpo_monitor.stats.aggregations`.

>>> lp = torch.tensor([[-1., -2., -3.], [-1., -1., 0.]], requires_grad=True)
>>> mask, adv = torch.tensor([[1, 1, 1], [1, 1, 0]]), torch.tensor([1., -1.])
>>> loss = -((adv[:, None] * lp * mask).sum(-1) / mask.sum(-1)).mean()  # seq_mean_token_mean
>>> measure_weights(loss, lp)[0].tolist()
[[-0.1666666716337204, -0.1666666716337204, -0.1666666716337204], [0.25, 0.25, 0.0]]
>>> rows = WeightRows(row_records(mask, adv, measure_weights(loss, lp)[0]).numpy())
>>> round(weight_metrics(rows)["grpo/weights/length_slope"], 6)  # float32 weights: 0 to 1e-7
0.0
"""

from __future__ import annotations

import math

import numpy as np
import torch

ROW_COLUMNS = ("weight", "c_mean", "c_min", "c_max", "length", "advantage", "group", "degenerate", "micro", "row",
               "source_row", "width", "checkable", "measured", "eps")
_COL = {name: i for i, name in enumerate(ROW_COLUMNS)}
RATIO_ONE = 1e-6  # |logprobs - old_logprobs| (nats) below which a token counts as at ratio 1


#: Why weights are not measured when ``loss`` does not depend on ``logprobs`` (autograd finds no path).
UNREACHABLE = ("loss= is not computed from the logprobs= given: autograd finds no path between them (a .float() "
               "or .clone() copy of the log-probs the loss used, log-probs of another forward pass, or another "
               "micro-batch's loss); pass the very tensor the loss was computed from")


def unmeasurable(loss: torch.Tensor, logprobs: torch.Tensor | None) -> str | None:
    """Why ``w`` cannot be measured here (None: it can)."""
    if torch.compiler.is_compiling():
        return "observe_loss(loss=) runs inside torch.compile, where autograd.grad cannot be traced"
    if logprobs is None:
        return "loss= was given without logprobs= (the tensor the loss was computed from)"
    if not logprobs.requires_grad:
        return "logprobs does not require grad (detached, or computed under torch.no_grad)"
    if not loss.requires_grad:
        return "loss does not require grad (detached, or computed under torch.no_grad)"
    return None


def measure_weights(loss: torch.Tensor, logprobs: torch.Tensor | None) -> tuple[torch.Tensor | None, str | None]:
    """``(w, None)`` with ``w = dloss/dlogprobs`` (zeros where the loss does not use a token), or
    ``(None, why)``, also when the loss does not depend on ``logprobs`` at all (:data:`UNREACHABLE`:
    all-zero weights would read as a loss that ignores every token). ``retain_graph=True`` leaves the graph for
    the trainer's ``backward``, and ``autograd.grad`` accumulates into no ``.grad`` (the parameters' gradients
    stay untouched)."""
    why = unmeasurable(loss, logprobs)
    if why is not None or logprobs is None:
        return None, why
    try:
        (w,) = torch.autograd.grad(loss.reshape(()), logprobs, retain_graph=True, allow_unused=True)
    except RuntimeError as exc:  # e.g. logprobs not on loss's graph, or a graph already freed
        return None, f"autograd.grad(loss, logprobs) failed: {exc}"
    if w is None:  # no path from logprobs to loss: the loss was not computed from these log-probs
        return None, UNREACHABLE
    return w.detach(), None


def row_records(mask: torch.Tensor, advantages: torch.Tensor, w: torch.Tensor | None = None, *, micro: int = 0,
                group: torch.Tensor | None = None, degenerate: torch.Tensor | None = None,
                source_row: torch.Tensor | None = None, checkable: torch.Tensor | None = None,
                c_columns: bool = True) -> torch.Tensor:
    """One float64 row of :data:`ROW_COLUMNS` per response of a ``(B, T)`` micro-batch. No host sync.

    ``c = -w / A`` per valid token with ``A != 0`` (mean, min, max per row; NaN without such a
    token); ``weight`` = sum of ``|w|`` over valid tokens (NaN when ``w`` is None: derived later).
    ``group``/``degenerate``/``source_row``: the rollout row's group, whether it is degenerate, its
    index (-1/NaN: unknown); ``checkable``: ratio 1 and no KL on every valid token (default all);
    ``eps``: the machine epsilon of ``w``'s dtype (the check's tolerance is at least 16 of them).
    ``c_columns=False`` (no row can be checked, e.g. a micro-batch with a KL term) leaves ``c`` NaN: only the check
    reads it.
    """
    valid = mask > 0
    b, t = valid.shape
    adv = advantages.double()
    length = valid.sum(-1).double()
    row_adv = adv if adv.dim() == 1 else torch.where(valid, adv, 0.0).sum(-1) / length.clamp(min=1)
    nan = math.nan
    const: dict[str, float] = dict(micro=float(micro), width=float(t), measured=float(w is not None),
                                   eps=torch.finfo(w.dtype).eps if w is not None and w.is_floating_point() else 0.0)
    cols: dict[str, torch.Tensor] = dict(length=length, advantage=row_adv)
    if w is None:
        const.update(weight=nan, c_mean=nan, c_min=nan, c_max=nan)
    else:
        wd = w.double()
        cols["weight"] = torch.where(valid, wd.abs(), 0.0).sum(-1)
        if c_columns:
            cols.update(_c_columns(valid, adv.unsqueeze(-1) if adv.dim() == 1 else adv, wd))
        else:
            const.update(c_mean=nan, c_min=nan, c_max=nan)
    for name, value, absent in (("group", group, -1.0), ("degenerate", degenerate, nan),
                                ("source_row", source_row, -1.0), ("checkable", checkable, 1.0)):
        if value is None:
            const[name] = absent
        else:
            cols[name] = value
    cols["row"] = torch.arange(b, device=mask.device, dtype=torch.float64)
    names = [n for n in ROW_COLUMNS if n in const]  # the constant columns: one host vector, broadcast to the rows
    fixed = dict(zip(names, torch.tensor([const[n] for n in names], dtype=torch.float64, device=mask.device)
                     .expand(b, len(names)).unbind(1), strict=True))
    return torch.stack([cols[n].to(torch.float64) if n in cols else fixed[n] for n in ROW_COLUMNS], dim=1)


def _c_columns(valid: torch.Tensor, adv_tok: torch.Tensor, wd: torch.Tensor) -> dict[str, torch.Tensor]:
    """``c = -w / A``'s mean, min and max per row over valid tokens with ``A != 0`` (NaN without such a token);
    ``adv_tok`` broadcasts against the ``(B, T)`` tokens."""
    live = valid & (adv_tok != 0)
    c = torch.where(live, -wd / torch.where(live, adv_tok, 1.0), 0.0)
    n_live = live.sum(-1)
    has = n_live > 0
    c_mean = torch.where(has, c.sum(-1) / n_live.clamp(min=1), math.nan)
    c_min = torch.where(has, torch.where(live, c, math.inf).amin(-1), math.nan)
    c_max = torch.where(has, torch.where(live, c, -math.inf).amax(-1), math.nan)
    return dict(c_mean=c_mean, c_min=c_min, c_max=c_max)


def checkable_rows(mask: torch.Tensor, logprobs: torch.Tensor | None, old_logprobs: torch.Tensor | None,
                   ref_logprobs: torch.Tensor | None) -> torch.Tensor:
    """Rows where ``w = -A c`` must hold: every valid token at ratio 1 (``|logprobs - old| <= 1e-6``),
    and no KL term (rows of a micro-batch given ``ref_logprobs`` are measured, not checked)."""
    valid = mask > 0
    ok = torch.ones(mask.shape[0], dtype=torch.bool, device=mask.device)
    if ref_logprobs is not None:
        return ~ok
    if old_logprobs is not None and logprobs is not None:
        gap = torch.where(valid, (logprobs.detach().double() - old_logprobs.double()).abs(), 0.0)
        ok = ok & (gap.amax(-1) <= RATIO_ONE)
    return ok


class WeightRows:
    """The step's per-response rows on the host, one attribute per :data:`ROW_COLUMNS` name."""

    weight: np.ndarray
    c_mean: np.ndarray
    c_min: np.ndarray
    c_max: np.ndarray
    length: np.ndarray
    advantage: np.ndarray
    group: np.ndarray
    degenerate: np.ndarray
    micro: np.ndarray
    row: np.ndarray
    source_row: np.ndarray
    width: np.ndarray
    checkable: np.ndarray
    measured: np.ndarray
    eps: np.ndarray

    def __init__(self, table: np.ndarray):
        self.table = np.asarray(table, dtype=np.float64).reshape(-1, len(ROW_COLUMNS))
        for name, i in _COL.items():
            setattr(self, name, self.table[:, i])

    def __len__(self) -> int:
        return len(self.table)

    def checked(self) -> np.ndarray:
        """Rows the aggregation check reads: measured, checkable, with a token and a finite ``c``."""
        t = self.table
        return ((t[:, _COL["measured"]] > 0) & (t[:, _COL["checkable"]] > 0) & (t[:, _COL["length"]] > 0)
                & np.isfinite(t[:, _COL["c_mean"]]))

    def with_weight(self, weight: np.ndarray) -> WeightRows:
        """A copy whose ``weight`` column is ``weight`` where it was NaN (derived weights)."""
        table = self.table.copy()
        col = table[:, _COL["weight"]]
        table[:, _COL["weight"]] = np.where(np.isnan(col), weight, col)
        return WeightRows(table)


def weight_metrics(rows: WeightRows) -> dict[str, float]:
    """The ``grpo/weights/`` shares of the step (``aggregation_id`` is added by the caller).

    Keys whose inputs are missing are left out: ``degenerate_share`` and the per-question keys
    need every row linked to its rollout group (``rows=``), ``length_slope`` rows of two lengths.
    """
    total = float(np.nansum(rows.weight))
    if len(rows) == 0 or not total > 0:
        return {"grpo/weights/measured": float(rows.measured.mean()) if len(rows) else 0.0}
    share = rows.weight / total
    out = {
        "grpo/weights/measured": float(rows.measured.mean()),
        "grpo/weights/effective_responses": 1.0 / float(np.sum(share ** 2)),
        "grpo/weights/long_quarter_share": float(share[np.argsort(-rows.length, kind="stable")][
            : max(1, len(rows) // 4)].sum()),
    }
    if not np.isnan(rows.degenerate).any():
        out["grpo/weights/degenerate_share"] = float(share[rows.degenerate > 0].sum())
    if (rows.group >= 0).all():
        per_question = np.bincount(rows.group.astype(np.int64), weights=share)
        out["grpo/weights/effective_questions"] = 1.0 / float(np.sum(per_question ** 2))
        out["grpo/weights/top_question_share"] = float(per_question.max())
    slope = length_slope(rows)
    if slope is not None:
        out["grpo/weights/length_slope"] = slope
    return out


def length_slope(rows: WeightRows) -> float | None:
    """Least-squares slope of ``log(weight / |A|)`` on ``log(length)`` over live rows, centred within each
    micro-batch (a micro-batch's own denominator is not read as a length effect): 0 for per-response means,
    1 for token sums. None when the live rows have a single length per micro-batch."""
    live = (np.abs(rows.advantage) > 0) & (rows.length > 0) & (rows.weight > 0)
    if live.sum() < 2:
        return None
    x, y = np.log(rows.length[live]), np.log(rows.weight[live] / np.abs(rows.advantage[live]))
    micro = rows.micro[live].astype(np.int64)
    counts = np.bincount(micro)
    xc = x - (np.bincount(micro, weights=x) / np.maximum(counts, 1))[micro]
    yc = y - (np.bincount(micro, weights=y) / np.maximum(counts, 1))[micro]
    sxx = float(np.sum(xc * xc))
    if sxx <= 1e-12:
        return None
    return float(np.sum(xc * yc)) / sxx
