"""Shared float64 building blocks of the advantage estimators, and the families built from them.

Conventions every function here follows (the monitor's, whatever the framework does):

* ``rewards`` is ``(N,)`` float64; NaN marks an unscorable row. Its advantage is 0 and it
  is left out of every statistic: group mean and std, leave-one-out terms, batch std,
  token whitening, the counts of GPG's batch factor.
* A group whose scorable rewards are all equal, or that has fewer than two of them, is
  *degenerate*. Its centred rewards are exactly 0 (no rounding residue), so no stabilizer
  turns rounding noise into a signal. Groups with exactly one scorable row follow the
  family's ``singleton`` rule: ``"zero"`` (advantage 0) or ``"raw"`` (verl's fallback of
  mean 0 and std 1: the row keeps its reward, divided by ``1 + eps`` where the family
  divides by a group std).
* Stabilizers are named by where ``eps`` enters, see :data:`STABILIZERS`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

#: Where the stabilizer enters the division of a centred reward ``x`` by a spread ``s``.
STABILIZERS: dict[str, str] = {
    "add": "x / (s + eps)",
    "add_if_positive": "x / (s + eps) where s > 0, x where s == 0",
    "clamp": "x / max(s, eps)",
    "add_var": "x / sqrt(s**2 + eps)",
    "clamp_var": "x / sqrt(max(s**2, eps))",
}


@dataclasses.dataclass(frozen=True)
class Layout:
    """Rows placed into a dense ``(groups, width)`` grid: group index and position of each row."""

    inv: np.ndarray  # (N,) dense group index, groups ordered as np.unique(gid)
    pos: np.ndarray  # (N,) position of the row inside its group
    valid: np.ndarray  # (N,) the reward is scorable (not NaN)
    rows: np.ndarray  # (B,) rows per group, scorable or not
    labels: np.ndarray  # (B,) the gid value of each group

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.rows), int(self.rows.max(initial=0))

    def dense(self, x: np.ndarray) -> np.ndarray:
        """``x`` on the grid, NaN on padding and on unscorable rows."""
        out = np.full(self.shape, np.nan)
        out[self.inv, self.pos] = np.where(self.valid, x, np.nan)
        return out

    def gather(self, grid: np.ndarray) -> np.ndarray:
        """The grid value of every row, ``(N,)``."""
        return grid[self.inv, self.pos]


def layout(rewards: np.ndarray, gid: np.ndarray) -> Layout:
    """The :class:`Layout` of ``gid`` (any integer labels, rows in any order)."""
    labels, inv = np.unique(gid, return_inverse=True)
    rows = np.bincount(inv, minlength=len(labels))
    order = np.argsort(inv, kind="stable")
    starts = np.concatenate(([0], np.cumsum(rows)[:-1]))
    pos = np.empty(len(inv), dtype=np.int64)
    pos[order] = np.arange(len(inv)) - starts[inv[order]]
    return Layout(inv.reshape(-1), pos, ~np.isnan(rewards), rows, labels)


@dataclasses.dataclass(frozen=True)
class GroupStats:
    """Per-group statistics over scorable rows (``(B,)``) and the centred grid (``(B, W)``)."""

    n: np.ndarray
    mean: np.ndarray
    centered: np.ndarray  # r - mean; exactly 0 in degenerate groups; NaN off the rows
    degenerate: np.ndarray

    def std(self, ddof: int) -> np.ndarray:
        """Std with ``ddof`` (0 population, 1 Bessel); 0 on degenerate groups."""
        ss = np.nansum(self.centered**2, axis=1)
        dof = np.maximum(self.n - ddof, 1)
        return np.where(self.degenerate, 0.0, np.sqrt(ss / dof))


def group_stats(lay: Layout, rewards: np.ndarray) -> GroupStats:
    """Mean, centred rewards and the degenerate mask of every group.

    >>> lay = layout(np.array([1.0, 0.0, 1.0, 0.0]), np.zeros(4, dtype=int))
    >>> s = group_stats(lay, np.array([1.0, 0.0, 1.0, 0.0]))
    >>> float(s.mean[0]), float(s.std(0)[0]), float(s.std(1)[0].round(4))
    (0.5, 0.5, 0.5774)
    """
    grid = lay.dense(rewards)
    n = (~np.isnan(grid)).sum(axis=1)
    mean = np.nansum(grid, axis=1) / np.maximum(n, 1)
    hi = np.max(np.where(np.isnan(grid), -np.inf, grid), axis=1, initial=-np.inf)
    lo = np.min(np.where(np.isnan(grid), np.inf, grid), axis=1, initial=np.inf)
    degenerate = ~(hi > lo)
    centered = np.where(degenerate[:, None], 0.0, grid - mean[:, None])
    return GroupStats(n, mean, np.where(np.isnan(grid), np.nan, centered), degenerate)


def stabilized_divide(x: np.ndarray, s: np.ndarray, eps: float, stabilizer: str) -> np.ndarray:
    """``x`` divided by the spread ``s`` with ``eps`` entering as :data:`STABILIZERS` says; 0 where the divisor is 0."""
    if stabilizer == "add_if_positive":
        return np.where(s > 0, x / np.where(s > 0, s + eps, 1.0), x)
    den = {
        "add": lambda: s + eps,
        "clamp": lambda: np.maximum(s, eps),
        "add_var": lambda: np.sqrt(s * s + eps),
        "clamp_var": lambda: np.sqrt(np.maximum(s * s, eps)),
    }[stabilizer]()
    ok = np.isfinite(den) & (den != 0)
    return np.where(ok, x / np.where(ok, den, 1.0), 0.0)


def batch_std(rewards: np.ndarray, ddof: int) -> float:
    """Std of all scorable rewards around the batch mean (NaN when fewer than ``ddof + 1``; 0 when all equal)."""
    r = rewards[~np.isnan(rewards)]
    if len(r) <= ddof:
        return float("nan")
    if r.max() == r.min():
        return 0.0
    return float(np.sqrt(((r - r.mean()) ** 2).sum() / (len(r) - ddof)))


def whiten(
    x: np.ndarray, weights: np.ndarray, *, ddof: int, eps: float, stabilizer: str, count_eps: float = 0.0
) -> np.ndarray:
    """Batch whitening ``(x - mu) / spread`` with rows weighted by ``weights`` (token counts; 0 leaves a row out).

    ``mu = sum(w x) / (sum(w) + count_eps)``; the variance is
    ``sum(w (x - mu)^2) / (sum(w) + count_eps) * L / (L - ddof)`` with ``L = sum(w)``
    (the token count, so ``ddof`` is Bessel over tokens); rows of weight 0 get 0.
    """
    w = np.where(np.isnan(x), 0.0, weights)
    xs = np.where(w > 0, x, 0.0)
    total = w.sum()
    if total <= ddof:
        return np.zeros_like(x)
    mu = (w * xs).sum() / (total + count_eps)
    var = (w * (xs - mu) ** 2).sum() / (total + count_eps) * total / (total - ddof)
    return np.where(w > 0, stabilized_divide(xs - mu, np.full_like(xs, np.sqrt(var)), eps, stabilizer), 0.0)


def loo_spread(lay: Layout, rewards: np.ndarray, ddof: int) -> np.ndarray:
    """Per-row std of the *other* scorable rewards of the row's group, ``(N,)``.

    Exactly 0 where the others are all equal (NeMo RL's "no variation" case), NaN where
    fewer than ``ddof + 1`` others exist. Two-pass on a ``(B, W, W)`` grid, so groups are
    expected to be small (tens of rows).
    """
    grid = lay.dense(rewards)
    width = grid.shape[1]
    others = np.where(np.eye(width, dtype=bool)[None], np.nan, grid[:, None, :])
    count = (~np.isnan(others)).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        base = np.nansum(others, -1) / count
        ss = np.nansum((others - base[..., None]) ** 2, -1)
        hi = np.max(np.where(np.isnan(others), -np.inf, others), -1, initial=-np.inf)
        lo = np.min(np.where(np.isnan(others), np.inf, others), -1, initial=np.inf)
        spread = np.where(count - ddof > 0, np.sqrt(ss / (count - ddof)), np.nan)
    return lay.gather(np.where(hi == lo, 0.0, spread))


# ---------------------------------------------------------------------------------------
# Families: pure references ``(rewards, gid, **params) -> advantages``, float64, 0 on NaN rows.
# ---------------------------------------------------------------------------------------


def centered(
    rewards: np.ndarray,
    gid: np.ndarray,
    *,
    scale: str = "none",
    ddof: int = 0,
    eps: float = 0.0,
    stabilizer: str = "add",
    singleton: str = "zero",
    factor: float = 1.0,
) -> np.ndarray:
    """``factor * (r - mean_g)``, divided by the group std (``scale="group"``), the batch std
    of the rewards around the batch mean (``"batch"``) or nothing (``"none"``).

    >>> r = np.array([1.0, 0.0, 1.0, 0.0]); g = np.zeros(4, dtype=int)
    >>> centered(r, g, scale="group", ddof=0).tolist()
    [1.0, -1.0, 1.0, -1.0]
    >>> centered(r, g, scale="group", ddof=1).round(4).tolist()
    [0.866, -0.866, 0.866, -0.866]
    """
    lay = layout(rewards, gid)
    st = group_stats(lay, rewards)
    x = lay.gather(st.centered)
    single = st.n[lay.inv] == 1
    if scale == "none":
        a, raw = x, rewards
    else:
        s = st.std(ddof)[lay.inv] if scale == "group" else np.full(len(x), batch_std(rewards, ddof))
        a = stabilized_divide(x, s, eps, stabilizer)
        raw = stabilized_divide(rewards, np.where(single, 1.0, s) if scale == "group" else s, eps, stabilizer)
    if singleton == "raw":
        a = np.where(single, raw, a)
    return np.where(lay.valid, factor * a, 0.0)


def leave_one_out(rewards: np.ndarray, gid: np.ndarray, *, singleton: str = "zero") -> np.ndarray:
    """``r_i - mean of the others`` = ``n/(n-1) (r_i - mean_g)`` (RLOO).

    >>> leave_one_out(np.array([1.0, 0.0, 1.0, 0.0]), np.zeros(4, dtype=int)).round(4).tolist()
    [0.6667, -0.6667, 0.6667, -0.6667]
    """
    lay = layout(rewards, gid)
    st = group_stats(lay, rewards)
    n = st.n[lay.inv].astype(float)
    a = lay.gather(st.centered) * n / np.maximum(n - 1, 1)
    if singleton == "raw":
        a = np.where(n == 1, rewards, a)
    return np.where(lay.valid, a, 0.0)


def loo_standardized(rewards: np.ndarray, gid: np.ndarray, *, ddof: int = 1, eps: float = 1e-6) -> np.ndarray:
    """Leave-one-out baseline over a per-row leave-one-out std, divided only where that std > 0.

    The successful row of a one-success group is left undivided (its others all fail);
    groups of two are never divided (one other: no std).

    >>> loo_standardized(np.array([1.0, 0.0, 0.0, 0.0]), np.zeros(4, dtype=int)).round(4).tolist()
    [1.0, -0.5773, -0.5773, -0.5773]
    """
    lay = layout(rewards, gid)
    st = group_stats(lay, rewards)
    n = st.n[lay.inv].astype(float)
    x = lay.gather(st.centered) * n / np.maximum(n - 1, 1)
    s = np.nan_to_num(loo_spread(lay, rewards, ddof), nan=0.0)
    return np.where(lay.valid, stabilized_divide(x, s, eps, "add_if_positive"), 0.0)


def mean_scaled(rewards: np.ndarray, gid: np.ndarray, *, eps: float = 1e-6, singleton: str = "raw") -> np.ndarray:
    """``(r - mean_g) / (mean_g + eps)`` (MaxRL); a slope ``1/(mean_g + eps)``, positive for rewards >= 0.

    >>> mean_scaled(np.array([6.0, 3.0]), np.zeros(2, dtype=int), eps=0.0).round(4).tolist()
    [0.3333, -0.3333]
    """
    lay = layout(rewards, gid)
    st = group_stats(lay, rewards)
    a = stabilized_divide(lay.gather(st.centered), st.mean[lay.inv], eps, "add")
    if singleton == "raw":
        a = np.where(st.n[lay.inv] == 1, rewards, a)
    return np.where(lay.valid, a, 0.0)


def positive_rate_scaled(
    rewards: np.ndarray, gid: np.ndarray, *, f_norm: float = 1.0, singleton: str = "raw"
) -> np.ndarray:
    """``alpha (r - mean_g) / f_norm`` with ``alpha = rows / max(nonzero rewards, 1)`` over scorable rows (GPG).

    >>> positive_rate_scaled(np.array([1.0, 0.0, 0.0, 0.0]), np.zeros(4, dtype=int)).tolist()
    [3.0, -1.0, -1.0, -1.0]
    """
    r = rewards[~np.isnan(rewards)]
    alpha = len(r) / max(int(np.count_nonzero(r)), 1)
    return centered(rewards, gid, scale="none", singleton=singleton, factor=alpha / f_norm)


def pass_at_k(
    rewards: np.ndarray, gid: np.ndarray, *, scale: str = "group", ddof: int = 1, eps: float = 1e-6,
    singleton: str = "error",
) -> np.ndarray:
    """Only each group's best row is nonzero: ``r_max - r_second``, over the group std when ``scale="group"``.

    ``singleton="error"`` raises on a group of one row, as verl does; a group left with one
    scorable row by NaN rewards gets 0.

    >>> pass_at_k(np.array([0.0, 1.0, 0.5]), np.zeros(3, dtype=int), scale="none").tolist()
    [0.0, 0.5, 0.0]
    """
    lay = layout(rewards, gid)
    if singleton == "error" and (lay.rows < 2).any():
        bad = lay.labels[lay.rows < 2][:5].tolist()
        raise ValueError(f"pass@k needs at least 2 rows per group (verl raises too) but groups {bad} have 1")
    st = group_stats(lay, rewards)
    grid = np.where(np.isnan(lay.dense(rewards)), -np.inf, lay.dense(rewards))
    grid = np.concatenate([grid, np.full((len(grid), 2), -np.inf)], axis=1)
    top = np.argmax(grid, axis=1)
    ranked = -np.sort(-grid, axis=1)
    with np.errstate(invalid="ignore"):
        gap = np.where(st.degenerate, 0.0, ranked[:, 0] - ranked[:, 1])
    if scale == "group":
        gap = stabilized_divide(gap, st.std(ddof), eps, "add")
    out = np.zeros(grid.shape)
    out[np.arange(len(grid)), top] = gap
    return np.where(lay.valid, lay.gather(out), 0.0)


def whitened(
    rewards: np.ndarray, gid: np.ndarray, *, lengths: np.ndarray | None = None, group_scale: str = "none",
    group_ddof: int = 1, group_eps: float = 0.0, ddof: int = 1, eps: float = 1e-8, stabilizer: str = "add_var",
    count_eps: float = 0.0, singleton: str = "zero", reward_scaling: float = 1.0, reward_bias: float = 0.0,
    reward_clip: float | None = None,
) -> np.ndarray:
    """A group step (:func:`centered`) then batch whitening over tokens (:func:`whiten`).

    Each row's advantage is constant over its tokens, so whitening over tokens is whitening
    over rows weighted by ``lengths`` (token counts); without ``lengths`` every row weighs 1
    and the Bessel count is the number of scorable rows. Rewards are first mapped to
    ``clip((r + reward_bias) * reward_scaling, +-reward_clip)`` (AReaL's reward scaling).
    """
    inner = whitened_inner(rewards, gid, group_scale=group_scale, group_ddof=group_ddof, group_eps=group_eps,
                           singleton=singleton, reward_scaling=reward_scaling, reward_bias=reward_bias,
                           reward_clip=reward_clip)
    w = np.ones(len(rewards)) if lengths is None else np.asarray(lengths, dtype=np.float64)
    return whiten(inner, w, ddof=ddof, eps=eps, stabilizer=stabilizer, count_eps=count_eps)


def whitened_inner(
    rewards: np.ndarray, gid: np.ndarray, *, group_scale: str = "none", group_ddof: int = 1, group_eps: float = 0.0,
    singleton: str = "zero", reward_scaling: float = 1.0, reward_bias: float = 0.0, reward_clip: float | None = None,
    **_whitening: object,
) -> np.ndarray:
    """The group step of :func:`whitened` (NaN on unscorable rows), before the whitening over tokens."""
    r = (rewards + reward_bias) * reward_scaling
    if reward_clip is not None:
        r = np.clip(r, -reward_clip, reward_clip)
    inner = centered(r, gid, scale=group_scale, ddof=group_ddof, eps=group_eps, singleton=singleton)
    return np.where(np.isnan(rewards), np.nan, inner)


def normalize_then_sum(
    rewards: np.ndarray, gid: np.ndarray, *, weights: tuple[float, ...] | None = None, group_eps: float = 1e-4,
    ddof: int = 1, eps: float = 1e-4,
) -> np.ndarray:
    """Multi-reward (``rewards`` is ``(N, K)``): z-score each column within its group, take the
    weighted sum (NaN cells count 0), then z-score the sums over the batch.

    A row is unscorable only when all its columns are NaN. A column with fewer than two
    scorable rows in a group contributes 0 to that group (TRL: its nanstd is NaN).
    """
    k = rewards.shape[1]
    w = np.ones(k) if weights is None else np.asarray(weights, dtype=np.float64)
    z = np.zeros(rewards.shape)
    for j in range(k):
        z[:, j] = centered(rewards[:, j], gid, scale="group", ddof=ddof, eps=group_eps)
    unscorable = np.isnan(rewards).all(axis=1)
    row = np.where(unscorable, np.nan, z @ w)
    live = row[~unscorable]
    s = batch_std(row, ddof)
    if len(live) <= ddof or s == 0:
        return np.zeros(len(row))
    return np.where(unscorable, 0.0, stabilized_divide(row - live.mean(), np.full(len(row), s), eps, "add"))
