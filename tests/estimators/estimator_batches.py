"""Batches for the estimator tests, and an independent numpy measure of each promise's breach."""

from __future__ import annotations

import dataclasses

import numpy as np

from grpo_monitor.estimators import Estimator

KINDS = ("binary", "continuous", "graded")


@dataclasses.dataclass(frozen=True)
class Batch:
    """Rewards (N,) or (N, K), group index, token counts; ``kind`` names how they were drawn."""

    rewards: np.ndarray
    gid: np.ndarray
    lengths: np.ndarray
    kind: str


def draw(kind: str, *, groups: int = 6, size: int = 4, seed: int = 0, shuffle: bool = False,
         nan_rows: int = 0, columns: int = 0, nonnegative: bool = False) -> Batch:
    """Random rewards of ``kind`` in contiguous groups (or shuffled rows); the last group is all-equal.

    ``nan_rows`` rows (never two in one group, never leaving a group under two scorable rows)
    become NaN; ``columns`` > 0 draws ``(N, columns)`` rewards with independent columns.
    """
    rng = np.random.default_rng(seed)
    n = groups * size
    shape = (n, columns) if columns else (n,)
    if kind == "binary":
        r = (rng.random(shape) < 0.5).astype(float)
    elif kind == "continuous":
        r = rng.normal(0.3, 1.0, shape)
    else:
        r = rng.integers(0, 5, shape) / 4.0
    if nonnegative:
        r = np.abs(r)
    r[-size:] = r[-size]  # one degenerate group
    gid = np.repeat(np.arange(groups), size)
    if nan_rows:
        r[np.arange(nan_rows) * size] = np.nan
    lengths = rng.integers(1, 30, n).astype(float)
    if shuffle:
        perm = rng.permutation(n)
        r, gid, lengths = r[perm], gid[perm], lengths[perm]
    return Batch(r, gid, lengths, kind)


def breaches(est: Estimator, batch: Batch, adv: np.ndarray, **params) -> dict[str, float]:
    """How far ``adv`` (made with ``params``) is from each promise, in typical |advantage| units (0: it holds)."""
    r = est.row_rewards(batch.rewards)
    valid = ~np.isnan(r)
    typ = _typical(r, batch.gid, adv)
    w = batch.lengths if est.token_weighted else np.ones(len(r))
    out = {
        "zero_group_mean": 0.0, "affine_in_rewards": 0.0, "degenerate_zero": 0.0, "one_nonzero_per_group": 0.0,
        "batch_zero_mean": abs(np.average(adv[valid], weights=w[valid])) / typ,
        "unscorable_rows": _unscorable(est, batch, adv, params) / typ,
    }
    for g in np.unique(batch.gid):
        rows = (batch.gid == g) & valid
        rg, ag = r[rows], adv[rows]
        out["zero_group_mean"] = max(out["zero_group_mean"], abs(ag.mean()) / typ)
        out["one_nonzero_per_group"] = max(out["one_nonzero_per_group"], float(np.sum(np.abs(ag) > 1e-12 * typ) > 1))
        if rg.max() == rg.min():
            out["degenerate_zero"] = max(out["degenerate_zero"], np.abs(ag).max() / typ)
        else:
            out["affine_in_rewards"] = max(out["affine_in_rewards"], _affine_misfit(rg, ag) / typ)
    return out


def _affine_misfit(r: np.ndarray, a: np.ndarray) -> float:
    """Rms residual of a = k (r - mean) + b, or the largest |a| when the slope is not positive."""
    c = r - r.mean()
    k = (c @ (a - a.mean())) / (c @ c)
    resid = np.sqrt(np.mean((a - a.mean() - k * c) ** 2))
    return resid if k > 0 else max(resid, float(np.abs(a).max()))


def _unscorable(est: Estimator, batch: Batch, adv: np.ndarray, params: dict) -> float:
    """Largest |advantage| on NaN rows, or change of the others when the NaN rows are dropped."""
    nan = np.isnan(est.row_rewards(batch.rewards))
    if not nan.any():
        return 0.0
    kept = est(batch.rewards[~nan], batch.gid[~nan], lengths=batch.lengths[~nan], **params)
    return max(float(np.abs(adv[nan]).max()), float(np.abs(adv[~nan] - kept).max()))


def _typical(r: np.ndarray, gid: np.ndarray, adv: np.ndarray) -> float:
    live = np.zeros(len(r), dtype=bool)
    for g in np.unique(gid):
        rows = (gid == g) & ~np.isnan(r)
        if rows.sum() >= 2 and r[rows].max() > r[rows].min():
            live |= rows
    vals = np.abs(adv[live])
    return float(np.median(vals)) or float(np.mean(vals)) or 1.0
