"""Loss aggregations: how a loss turns per-token terms into the scalar it differentiates.

At ratio 1, inactive clipping and no KL on a token, every aggregation below gives the token
the gradient coefficient ``w = dloss/dlogprob = -A * c(row, batch)``; what tells them apart
is ``c``. With ``L`` a row's valid tokens, ``k`` the micro-batches of the optimizer step,
``B``/``N`` the rows/valid tokens of the micro-batch (``B_s``/``N_s``: of the step), ``H``
the micro-batch's padded width and ``T`` a declared constant:

============================  ===============  ======================  ==================
aggregation                   ``c`` per row    micro-batch scope       step scope
============================  ===============  ======================  ==================
``token_mean``                ``1 / D``        ``D = k N``             ``D = N_s``
``token_sum``                 ``1 / D``        ``D = k``               ``D = 1``
``seq_mean_token_mean``       ``1 / (D L)``    ``D = k B``             ``D = B_s``
``seq_mean_token_sum``        ``1 / D``        ``D = k B``             ``D = B_s``
``seq_mean_token_sum_norm``   ``1 / D``        ``D = k B H``           ``D = B_s H``
``constant_normalizer``       ``1 / D``        ``D = k B T``           ``D = B_s T``
============================  ===============  ======================  ==================

"Micro-batch scope": each micro-batch normalises by its own counts and the loss is divided
by the number of micro-batches (TRL's ``grpo``, ``bnpo``, ``dr_grpo``); "step scope": each
micro-batch divides by the whole optimizer step's counts (TRL's ``dapo``, verl with
``global_batch_info``). ``B`` is read both ways a trainer counts it (every row, or rows with
a valid token). TRL's and verl's names map onto these (:data:`ALIASES`).

>>> resolve("trl.dr_grpo")
('constant_normalizer', 'micro_batch')
>>> resolve("seq-mean-token-mean")
('seq_mean_token_mean', 'auto')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..catalog.family_weights import AGGREGATION_ALIASES, LENGTH_POWERS

Scope = str  # "micro_batch", "step" or "auto"
SCOPES = ("auto", "micro_batch", "step")


@dataclasses.dataclass(frozen=True)
class Aggregation:
    """One aggregation: its stable index (``grpo/weights/aggregation_id``), whether ``c`` carries
    ``1 / L`` (``per_length``), and what it does to long and short responses."""

    name: str
    index: int
    per_length: bool
    effect: str


_EFFECTS = {
    "token_mean": "every token weighs the same: a response weighs by its length (long responses dominate; the "
                  "length_slope is 1)",
    "seq_mean_token_mean": "every response weighs the same whatever its length: a token of a short response weighs "
                           "more than one of a long response (length_slope 0); a long wrong answer is penalised per "
                           "token less than a short one",
    "seq_mean_token_sum": "token sums averaged over responses: like token_mean, a response weighs by its length, "
                          "with a denominator that does not depend on the lengths",
    "seq_mean_token_sum_norm": "token sums over rows times the padded width: a response weighs by its length; the "
                               "width changes with the batch's longest response",
    "constant_normalizer": "token sums over a fixed budget (Dr. GRPO, max_completion_length): a response weighs by its "
                           "length and the denominator is not random",
    "token_sum": "plain token sums: a response weighs by its length and the update grows with the batch's token count",
}
# names, indices and powers of length: the catalogue's table (the weights figure draws its slopes by it)
_RECORDS = tuple(Aggregation(name, index, power == 0.0, _EFFECTS[name])
                 for index, (name, power) in enumerate(LENGTH_POWERS.items()))

#: Every aggregation by name, in index order.
AGGREGATIONS: Mapping[str, Aggregation] = {a.name: a for a in _RECORDS}

#: The order an "auto" fit tries them: a fitted constant normaliser last, as every constant denominator fits it.
FIT_ORDER = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "token_sum", "seq_mean_token_sum_norm",
             "constant_normalizer")

#: Trainer names -> (aggregation, scope). TRL 1.16 ``loss_type`` and verl 0.9.1 ``loss_agg_mode`` (held by the
#: catalogue beside the names: ``catalog/family_weights.py``).
ALIASES: Mapping[str, tuple[str, Scope]] = AGGREGATION_ALIASES


def known_names() -> list[str]:
    """Every name ``MonitorConfig.loss_aggregation`` takes."""
    return ["auto", *AGGREGATIONS, *ALIASES]


def resolve(name: str, scope: Scope = "auto") -> tuple[str, Scope]:
    """``(aggregation, scope)`` of a name or alias; an explicit ``scope`` wins over the alias's.

    >>> resolve("trl.dapo"), resolve("token_mean", "micro_batch")
    (('token_mean', 'step'), ('token_mean', 'micro_batch'))
    """
    if scope not in SCOPES:
        raise ValueError(f"loss_scope must be one of {SCOPES}, but got {scope!r}")
    if name in AGGREGATIONS:
        return name, scope
    if name in ALIASES:
        agg, alias_scope = ALIASES[name]
        return agg, scope if scope != "auto" else alias_scope
    raise ValueError(f"unknown loss aggregation {name!r}; expected one of {known_names()}")


def aggregation_index(name: str | None) -> float:
    """The stable index of an aggregation (-1: none)."""
    return float(AGGREGATIONS[name].index) if name is not None and name in AGGREGATIONS else -1.0



# ------------------------------------------------------------------ host side: fit and check
@dataclasses.dataclass(frozen=True)
class Fit:
    """An aggregation the measured weights follow: name, scope, ``T`` (constant_normalizer only) and the
    worst relative deviation of a checked row from it."""

    name: str
    scope: Scope
    normalizer: float | None
    worst: float


def denominators(name: str, scope: Scope, rows: Any, normalizer: float | None) -> list[np.ndarray]:
    """Per-row denominators ``D`` the aggregation predicts, one array per reading of ``B`` (see module doc).

    ``rows`` is a :class:`~grpo_monitor.stats.weights.WeightRows`; ``normalizer`` is ``T`` of
    ``constant_normalizer`` (NaN denominators without it).
    """
    micro = rows.micro.astype(np.int64)
    k = int(micro.max()) + 1 if len(micro) else 1
    n = len(micro)

    def per_micro(values: np.ndarray) -> np.ndarray:
        return np.bincount(micro, weights=values, minlength=k)[micro]

    step = scope == "step"
    if name == "token_mean":
        return [np.full(n, rows.length.sum()) if step else k * per_micro(rows.length)]
    if name == "token_sum":
        return [np.full(n, 1.0 if step else float(k))]
    out = []
    for counted in (np.ones(n), (rows.length > 0).astype(float)):  # B: every row, or rows with a token
        base = np.full(n, counted.sum()) if step else k * per_micro(counted)
        if name == "seq_mean_token_sum_norm":
            base = base * rows.width
        elif name == "constant_normalizer":
            base = base * (normalizer if normalizer is not None else np.nan)
        out.append(base)
    return out


def deviations(rows: Any, name: str, denominator: np.ndarray) -> np.ndarray:
    """Per checked row: the relative deviation of the measured ``c`` (mean and within-row spread) from
    ``1 / (D f(L))``."""
    expected = 1.0 / (denominator * (rows.length if AGGREGATIONS[name].per_length else 1.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        off = np.maximum(np.abs(rows.c_mean / expected - 1.0), (rows.c_max - rows.c_min) / np.abs(expected))
    return np.where(np.isfinite(off), off, np.inf)


def row_tolerance(rows: Any, tol: float) -> np.ndarray:
    """Per row: ``tol``, or 16 epsilons of the weights' dtype when larger (bfloat16 log-probs: 0.125)."""
    return np.maximum(tol, 16.0 * rows.eps)


def fitted_normalizer(rows: Any, scope: Scope) -> float | None:
    """``T`` of ``constant_normalizer`` read off the checked rows (median of ``1 / (c B)``), None without rows."""
    checked = rows.checked()
    if not checked.any():
        return None
    (d_all, _) = denominators("seq_mean_token_sum", scope, rows, None)
    t = 1.0 / (rows.c_mean[checked] * d_all[checked])
    return float(np.median(t)) if np.isfinite(t).all() else None


def match(rows: Any, name: str, scope: Scope, normalizer: float | None, tol: float) -> Fit | None:
    """The fit of ``name`` (scope ``"auto"``: micro-batch, then step) when every checked row is within ``tol``."""
    checked = rows.checked()
    for sc in (("micro_batch", "step") if scope == "auto" else (scope,)):
        t = normalizer
        if name == "constant_normalizer" and t is None:
            t = fitted_normalizer(rows, sc)
        for denominator in denominators(name, sc, rows, t):
            off = deviations(rows, name, denominator)[checked]
            worst = float(off.max(initial=0.0))
            if bool((off <= row_tolerance(rows, tol)[checked]).all()):
                return Fit(name, sc, t if name == "constant_normalizer" else None, worst)
    return None


def fit_aggregation(rows: Any, tol: float, prefer: str | None = None, normalizer: float | None = None) -> Fit | None:
    """The first aggregation (``prefer`` first, then ``FIT_ORDER``) every checked row follows; None: none does
    or no row is checkable."""
    if not rows.checked().any():
        return None
    order = ([prefer] if prefer is not None and prefer in AGGREGATIONS else []) + [a for a in FIT_ORDER if a != prefer]
    for name in order:
        found = match(rows, name, "auto", normalizer if name == "constant_normalizer" else None, tol)
        if found is not None:
            return found
    return None


def offending_rows(rows: Any, name: str, scope: Scope, normalizer: float | None, tol: float,
                   limit: int = 3) -> tuple[np.ndarray, np.ndarray, int]:
    """Checked rows off the declared aggregation: (first ``limit`` row positions, their expected ``c``, count).

    Scope ``"auto"`` takes the reading (scope, ``B``) with the fewest offending rows.
    """
    checked = rows.checked()
    best: tuple[int, np.ndarray, np.ndarray] | None = None
    for sc in (("micro_batch", "step") if scope == "auto" else (scope,)):
        t = normalizer if normalizer is not None or name != "constant_normalizer" else fitted_normalizer(rows, sc)
        for denominator in denominators(name, sc, rows, t):
            bad = checked & (deviations(rows, name, denominator) > row_tolerance(rows, tol))
            expected = 1.0 / (denominator * (rows.length if AGGREGATIONS[name].per_length else 1.0))
            if best is None or int(bad.sum()) < best[0]:
                best = (int(bad.sum()), bad, expected)
    assert best is not None
    count, bad, expected = best
    where = np.flatnonzero(bad)[:limit]
    return where, expected[where], count
