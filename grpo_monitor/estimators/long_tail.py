"""Families for the long tail of shipped estimators: length-weighted and batch-mean baselines, clipping,
multi-reward decoupled normalisation. Pure float64 references, 0 on NaN rows (see :mod:`.families`).
"""

from __future__ import annotations

import numpy as np

from .families import batch_std, centered, group_stats, layout, stabilized_divide, whiten


def length_weighted(rewards: np.ndarray, gid: np.ndarray, *, lengths: np.ndarray | None = None,
                    leave_one_out: bool = False) -> np.ndarray:
    """``r_i - b``, the baseline weighted by token counts: ``b_g = sum_g(w r) / sum_g(w)`` (verl's OPO) or,
    with ``leave_one_out``, the same over the *other* rows of the group. A one-row group keeps ``r``
    (baseline 0, as verl). Without ``lengths`` every row weighs 1 (plain centring, or RLOO).

    >>> length_weighted(np.array([1.0, 0.0]), np.zeros(2, dtype=int), lengths=np.array([1.0, 3.0])).tolist()
    [0.75, -0.25]
    """
    lay = layout(rewards, gid)
    w = np.ones(len(rewards)) if lengths is None else np.asarray(lengths, dtype=np.float64)
    w = np.where(lay.valid, w, 0.0)
    x = np.where(lay.valid, rewards, 0.0)
    ws = np.bincount(lay.inv, weights=w, minlength=len(lay.rows))[lay.inv]
    wr = np.bincount(lay.inv, weights=w * x, minlength=len(lay.rows))[lay.inv]
    n = group_stats(lay, rewards).n[lay.inv]
    if leave_one_out:
        ws, wr = ws - w, wr - w * x
    with np.errstate(invalid="ignore", divide="ignore"):
        base = np.where(ws > 0, wr / np.where(ws > 0, ws, 1.0), 0.0)
    degenerate = group_stats(lay, rewards).degenerate[lay.inv]
    a = np.where(n == 1, x, np.where(degenerate & (n > 1), 0.0, x - base))
    return np.where(lay.valid, a, 0.0)


def whitened_rewards(rewards: np.ndarray, gid: np.ndarray, *, lengths: np.ndarray | None = None, ddof: int = 1,
                     eps: float = 1e-8, stabilizer: str = "add_var", count_eps: float = 0.0) -> np.ndarray:
    """The rewards themselves whitened over tokens, no group baseline (REINFORCE++): ``(r - mu) / sqrt(var + eps)``
    with rows weighted by ``lengths`` (a row's return is its reward on every token when the reward sits on the
    last token and nothing discounts it); ``gid`` only places NaN rows.

    >>> whitened_rewards(np.array([1.0, 0.0, 1.0, 1.0]), np.array([0, 0, 1, 1]), lengths=np.ones(4), eps=0.0).tolist()
    [0.5, -1.5, 0.5, 0.5]
    """
    w = np.ones(len(rewards)) if lengths is None else np.asarray(lengths, dtype=np.float64)
    return whiten(rewards, w, ddof=ddof, eps=eps, stabilizer=stabilizer, count_eps=count_eps)


def batch_mean(rewards: np.ndarray, gid: np.ndarray, *, scale: str = "none", ddof: int = 1,
               eps: float = 1e-6) -> np.ndarray:
    """``r - mean of the batch``, divided by the batch std + eps when ``scale="batch"`` (ROLL's
    ``norm_mean_type="batch"``); ``gid`` only places NaN rows. Constant groups keep ``r - mean``.

    >>> batch_mean(np.array([1.0, 0.0, 1.0, 1.0]), np.array([0, 0, 1, 1])).tolist()
    [0.25, -0.75, 0.25, 0.25]
    """
    valid = ~np.isnan(rewards)
    x = rewards - (rewards[valid].mean() if valid.any() else 0.0)
    if scale == "batch":
        x = stabilized_divide(x, np.full(len(x), batch_std(rewards, ddof)), eps, "add")
    return np.where(valid, x, 0.0)


def clipped(rewards: np.ndarray, gid: np.ndarray, *, scale: str = "group", ddof: int = 1, eps: float = 1e-6,
            clip: float = np.inf, low: float | None = None, singleton: str = "zero") -> np.ndarray:
    """A group step (:func:`~.families.centered`) clipped after normalisation: to ``[-clip, clip]``, or to
    ``[low, clip]`` when ``low`` is given (``low=0``: negative advantages set to 0).

    >>> clipped(np.array([1.0, 0.0, 0.0, 0.0]), np.zeros(4, dtype=int), scale="none", clip=np.inf, low=0.0).tolist()
    [0.75, 0.0, 0.0, 0.0]
    """
    a = centered(rewards, gid, scale=scale, ddof=ddof, eps=eps, singleton=singleton)
    return np.where(np.isnan(rewards), 0.0, np.clip(a, -clip if low is None else low, clip))


def decoupled_whitened(rewards: np.ndarray, gid: np.ndarray, *, lengths: np.ndarray | None = None,
                       weights: tuple[float, ...] | None = None, group_ddof: int = 1, group_eps: float = 1e-6,
                       ddof: int = 1, eps: float = 1e-8, count_eps: float = 1e-8) -> np.ndarray:
    """Multi-reward (``rewards (N, K)``): each column z-scored within its group (verl's GRPO step: one-row
    groups keep their reward), the weighted sum (NaN cells count 0), then token whitening (verl's GDPO).
    """
    k = rewards.shape[1]
    w = np.ones(k) if weights is None else np.asarray(weights, dtype=np.float64)
    z = np.zeros(rewards.shape)
    for j in range(k):
        z[:, j] = centered(rewards[:, j], gid, scale="group", ddof=group_ddof, eps=group_eps, singleton="raw")
    unscorable = np.isnan(rewards).all(axis=1)
    row = np.where(unscorable, np.nan, z @ w)
    tokens = np.ones(len(row)) if lengths is None else np.asarray(lengths, dtype=np.float64)
    return whiten(row, tokens, ddof=ddof, eps=eps, stabilizer="add_var", count_eps=count_eps)
