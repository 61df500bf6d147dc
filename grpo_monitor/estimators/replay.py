"""Replay observed advantages against the references: fit the stabilizer, measure the misfit.

``fit`` solves an estimator's free parameter (``Estimator.fit_param``, the stabilizer) in
closed form when ``1/|a|**p`` is affine in it (``eps_power = p``: ``x / (s + eps)`` has
p = 1, ``x / sqrt(var + eps)`` p = 2): every informative row gives one solution and their
median is kept, clipped at 0. Otherwise a 1-D search over a log grid is used. The misfit is
the largest per-group rms residual in units of the typical |advantage| (the median over the
scorable rows of groups with reward variation). Pure numpy float64, no state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .base import Estimator, check_inputs, check_lengths
from .families import Layout, group_stats, layout
from .registry import ESTIMATORS, get


@dataclasses.dataclass(frozen=True)
class Fit:
    """How well one estimator explains observed advantages.

    ``residual`` is the largest per-group rms residual over typical |advantage| (``inf``
    when the reference refused the batch, with the reason in ``error``); ``params`` the
    fitted parameter (empty when nothing is free); ``identified`` whether the data pinned
    it (False: no row was sensitive to it, the default was kept); ``group_residuals`` the
    per-group values, groups ordered as ``groups`` (``np.unique(gid)``); ``reward_std`` the
    mean population reward std of the groups with reward variation (the scale a plausible
    stabilizer is small against).
    """

    name: str
    residual: float
    params: Mapping[str, float]
    identified: bool
    group_residuals: np.ndarray
    groups: np.ndarray
    typical: float
    reward_std: float = float("nan")
    error: str | None = None

    def fits(self, tol: float, max_eps_ratio: float | None = None) -> bool:
        """The reference ran, its residual is at most ``tol`` and (with ``max_eps_ratio``) the
        fitted stabilizer is at most that fraction of ``reward_std``."""
        if self.error is not None or self.residual > tol:
            return False
        eps = self.params.get("eps")
        return max_eps_ratio is None or eps is None or eps <= max_eps_ratio * self.reward_std


def fit(
    estimator: str | Estimator, rewards: Any, gid: Any, advantages: Any, *, lengths: Any = None, free: bool = True,
    fixed: Mapping[str, Any] | None = None,
) -> Fit:
    """Fit ``estimator``'s stabilizer to ``advantages`` (``free=False`` keeps its defaults) and measure the misfit.

    ``fixed`` overrides other parameters for every evaluation (e.g. AReaL's
    ``reward_scaling``); names the estimator does not have are ignored.

    >>> r = np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]); g = np.repeat([0, 1], 4)
    >>> f = fit("bessel", r, g, get("bessel")(r, g, eps=1e-3))
    >>> round(f.params["eps"], 9), f.residual < 1e-12
    (0.001, True)
    """
    est = get(estimator) if isinstance(estimator, str) else estimator
    est = _with_fixed(est, fixed)
    r, g = check_inputs(est, rewards, gid)
    a = _check_advantages(advantages, len(g))
    w = None if lengths is None else check_lengths(lengths, len(g))
    row = est.row_rewards(r)
    lay = layout(row, g)
    typ = typical_abs_advantage(a, lay, row)
    stats = group_stats(lay, row)
    live_std = stats.std(0)[~stats.degenerate]
    spread = float(live_std.mean()) if len(live_std) else float("nan")
    try:
        params, identified = _solve(est, est.fit_param, r, g, a, w, lay, typ) if free and est.fit_param else ({}, False)
        pred = est(r, g, lengths=w, **params)
    except ValueError as err:
        inf = np.full(len(lay.rows), np.inf)
        return Fit(est.name, float("inf"), {}, False, inf, lay.labels, typ, spread, error=str(err))
    per_group = _group_rms(a - pred, lay) / typ
    return Fit(est.name, float(per_group.max(initial=0.0)), params, identified, per_group, lay.labels, typ, spread)


def fit_all(
    rewards: Any, gid: Any, advantages: Any, *, lengths: Any = None, names: Iterable[str] | None = None,
    free: bool = True, fixed: Mapping[str, Any] | None = None,
) -> list[Fit]:
    """:func:`fit` of every applicable estimator (or those in ``names``), best first.

    ``rewards (N,)`` is replayed through the single-reward estimators; ``rewards (N, K)``
    through the multi-reward ones and, on the column sums, through the single-reward ones.
    """
    r = np.asarray(rewards, dtype=np.float64)
    pool = [get(n) for n in names] if names is not None else list(ESTIMATORS.values())
    fits = []
    for est in pool:
        if est.multi_reward and r.ndim != 2:
            continue
        data = r if est.multi_reward or r.ndim == 1 else _column_sum(r)
        fits.append(fit(est, data, gid, advantages, lengths=lengths, free=free, fixed=fixed))
    return sorted(fits, key=lambda f: f.residual)


def candidates(
    rewards: Any, gid: Any, advantages: Any, tol: float = 1e-4, *, lengths: Any = None,
    names: Iterable[str] | None = None, free: bool = True, fixed: Mapping[str, Any] | None = None,
    max_eps_ratio: float | None = None,
) -> list[str]:
    """Names of the estimators whose residual is at most ``tol``, best first (see :func:`fit_all`).

    With ``max_eps_ratio`` a fit also needs a plausible stabilizer: at most that fraction
    of the mean reward std of live groups (a free ``eps`` can otherwise turn a batch-std
    estimator into plain centring, ``eps = 1 - std``).
    """
    fits = fit_all(rewards, gid, advantages, lengths=lengths, names=names, free=free, fixed=fixed)
    return [f.name for f in fits if f.fits(tol, max_eps_ratio)]


def typical_abs_advantage(advantages: np.ndarray, lay: Layout, rewards: np.ndarray) -> float:
    """Median |advantage| over scorable rows of groups with reward variation.

    Falls back to their mean |advantage| when the median is 0 (pass@k zeroes most rows),
    then to 1.0 when there are no such rows or all are 0.
    """
    live = ~group_stats(lay, rewards).degenerate
    vals = np.abs(advantages[lay.valid & live[lay.inv]])
    for stat in (np.median, np.mean):
        value = float(stat(vals)) if len(vals) else 0.0
        if value > 0:
            return value
    return 1.0


def _with_fixed(est: Estimator, fixed: Mapping[str, Any] | None) -> Estimator:
    """``est`` with the known names of ``fixed`` as its defaults."""
    known = {k: v for k, v in (fixed or {}).items() if k in est.params}
    return dataclasses.replace(est, params={**est.params, **known}) if known else est


def _solve(est: Estimator, name: str, r, g, a, w, lay: Layout, typ: float) -> tuple[dict[str, float], bool]:
    """Fit ``est``'s parameter ``name`` (its ``fit_param``)."""
    if name == "clip":
        return _clip_bound(est, r, g, a, w)
    if est.eps_power is not None:
        return _closed_form(est, name, est.eps_power, r, g, a, w)
    return _search(est, name, r, g, a, w, lay, typ)


def _closed_form(est: Estimator, name: str, p: int, r, g, a, w) -> tuple[dict[str, float], bool]:
    """Each row where the estimator is sensitive to the parameter solves ``1/|a|**p`` = affine(eps)."""
    a0 = est(r, g, lengths=w, **{name: 0.0})
    a1 = est(r, g, lengths=w, **{name: 1.0})
    with np.errstate(divide="ignore", invalid="ignore"):
        u, u0, u1 = (1.0 / np.abs(x) ** p for x in (a, a0, a1))
        slope = u1 - u0
        ok = (a != 0) & (a0 != 0) & (a1 != 0) & (np.sign(a) == np.sign(a0)) & np.isfinite(u0 + u1 + u)
        ok &= np.abs(slope) > 1e-9 * (u0 + u1)
        sol = (u - u0) / slope
    if not ok.any():
        return {name: float(est.params[name])}, False
    return {name: max(float(np.median(sol[ok])), 0.0)}, True


def _clip_bound(est: Estimator, r, g, a, w) -> tuple[dict[str, float], bool]:
    """A clip bound ``c`` is the largest |advantage| when some unclipped advantage goes beyond it (else unpinned)."""
    free = est(r, g, lengths=w, clip=np.inf)
    top = float(np.abs(a).max(initial=0.0))
    if float(np.abs(free).max(initial=0.0)) > top * (1 + 1e-6):
        return {"clip": top}, True
    return {"clip": float(est.params["clip"])}, False


def _search(est: Estimator, name: str, r, g, a, w, lay: Layout, typ: float) -> tuple[dict[str, float], bool]:
    """Smallest misfit over the default, 0 and a log grid of values (ties keep the default)."""
    default = float(est.params[name])
    grid = [default, 0.0, *np.logspace(-14, 0, 57)]
    scores = [(_group_rms(a - est(r, g, lengths=w, **{name: v}), lay) / typ).max(initial=0.0) for v in grid]
    best = int(np.argmin(scores))
    if scores[best] >= scores[0] * (1 - 1e-6):
        return {name: default}, False
    return {name: float(grid[best])}, True


def _group_rms(diff: np.ndarray, lay: Layout) -> np.ndarray:
    ss = np.bincount(lay.inv, weights=diff * diff, minlength=len(lay.rows))
    return np.sqrt(ss / np.maximum(lay.rows, 1))


def _check_advantages(advantages: Any, n: int) -> np.ndarray:
    a = np.asarray(advantages, dtype=np.float64)
    if a.shape != (n,):
        raise ValueError(f"advantages has shape {a.shape} but rewards has {n} rows; pass one advantage per row")
    if not np.isfinite(a).all():
        rows = np.flatnonzero(~np.isfinite(a))[:5].tolist()
        raise ValueError(f"advantages hold non-finite values at rows {rows}; a replay needs finite advantages")
    return a


def _column_sum(r: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(r).all(axis=1), np.nan, np.nan_to_num(r, nan=0.0).sum(axis=1))
