"""A checked rollout's rows on the host, and the fit of token-whitening estimators without token counts."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import families
from .base import Estimator


@dataclasses.dataclass(frozen=True)
class Rows:
    """A rollout's rows on the host: rewards, group index, advantages and token counts (None when any
    call lacked them), the group labels, and the reward components ``(N, K)`` with their weights
    (None when any call lacked them or their weights differ)."""

    rewards: np.ndarray
    gid: np.ndarray
    advantages: np.ndarray | None
    lengths: np.ndarray | None
    labels: list
    components: np.ndarray | None = None
    weights: tuple[float, ...] | None = None

    @property
    def replayable(self) -> bool:
        """Advantages present and every value finite (infinite ones are a ``finite`` breach already)."""
        a, r = self.advantages, self.rewards
        return a is not None and bool(np.isfinite(a).all()) and not bool(np.isinf(r).any())


def host_rows(records: Sequence[Any]) -> Rows:
    """The rows of ``records`` on the host (one device-to-host copy per tensor), group ids made global."""
    def host(parts: Sequence[Any]) -> np.ndarray:
        return np.concatenate([p.detach().double().cpu().numpy() for p in parts])

    def cat(name: str) -> np.ndarray | None:
        parts = [getattr(rec, name, None) for rec in records]
        if any(p is None for p in parts):
            return None
        return host(parts)

    gids, labels, offset = [], [], 0
    for rec in records:
        gids.append(rec.gid.detach().cpu().numpy() + offset)
        labels += list(rec.labels)
        offset += len(rec.labels)
    comps, weights = cat("components"), {getattr(rec, "weights", None) for rec in records}
    if comps is not None and len(weights) != 1:
        comps = None
    return Rows(host([rec.rewards for rec in records]), np.concatenate(gids), cat("advantages"), cat("lengths"),
                labels, comps, weights.pop() if comps is not None else None)


def fit_whitened(est: Estimator, r: np.ndarray, g: np.ndarray, a: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """A token-whitening estimator replayed without token counts: ``a = alpha ref + beta``, fitted.

    Whitening over tokens is ``(x - mu) / sigma`` with ``mu`` and ``sigma`` weighted by each
    row's token count, which the rollout does not carry; any weights give the same ``x`` up
    to one affine map, so ``alpha > 0`` and ``beta`` are fitted by least squares over the
    scorable rows. Whatever the weights, a whitened batch averages to 0 under positive weights,
    so advantages all of one sign (a forgotten centring shifted every group alike) never fit.
    Returns (max group residual / typical |advantage|, per-group residuals, groups).
    """
    ref = est(r, g)
    valid = ~np.isnan(est.row_rewards(r))
    x, y = ref[valid], a[valid]
    design = np.stack([x, np.ones_like(x)], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(design, y, rcond=None)
    groups, inv = np.unique(g[valid], return_inverse=True)
    resid = y - (alpha * x + beta)
    rms = np.sqrt(np.bincount(inv, resid * resid) / np.maximum(np.bincount(inv), 1))
    live = np.bincount(inv, np.abs(x - np.bincount(inv, x)[inv] / np.bincount(inv)[inv])) > 0
    typ = float(np.median(np.abs(y[live[inv]]))) if live.any() else 1.0
    per_group = rms / (typ if typ > 0 else 1.0)
    one_sign = len(y) > 0 and (y.min() >= 0 or y.max() <= 0) and bool(np.abs(y).max() > 0)
    if not alpha > 0 or one_sign:
        per_group = np.full_like(per_group, np.inf)
    return float(per_group.max(initial=0.0)), per_group, groups


def whitens(est: Estimator) -> bool:
    """Whether ``est`` ends in a whitening over tokens (its replay without token counts fits offset and scale)."""
    from .long_tail import decoupled_whitened

    ref = est.reference
    func = ref.func if isinstance(ref, functools.partial) else ref
    return func is families.whitened or func is decoupled_whitened


def uniform_shift(est: Estimator, r: np.ndarray, g: np.ndarray, a: np.ndarray, tol: float) -> bool:
    """Whether ``a`` is the estimator's group step plus one nonzero constant (slope 1 to 1e-3): a forgotten or
    extra term, not a whitening, whose scale is the tokens' std and 1 only by coincidence."""
    ref = est.reference
    if not (isinstance(ref, functools.partial) and ref.func is families.whitened):
        return False
    x = families.whitened_inner(r, g, **{**ref.keywords, **est.params})
    valid = ~np.isnan(x)
    design = np.stack([x[valid], np.ones(int(valid.sum()))], axis=1)
    (slope, shift), *_ = np.linalg.lstsq(design, a[valid], rcond=None)
    typ = float(np.median(np.abs(a[valid]))) or 1.0
    return abs(slope - 1.0) <= 1e-3 and abs(shift) > tol * typ
