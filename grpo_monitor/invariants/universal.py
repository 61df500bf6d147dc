"""What every sane advantage estimator does, known or not: the universal invariants (host side, numpy).

Under ``estimator="auto"``, when no registry entry explains a step's advantages, these
decide between an ``unknown_estimator`` warning (they hold: an estimator the registry does not
know) and an error (they break: a bug whatever the estimator):

* advantages are finite (checked on the device already: a replay needs finite values) and bounded:
  none beyond :data:`MAX_RATIO` x the typical |advantage| (a division by a vanishing spread, e.g.
  a leave-one-out std + 1e-6 where the other rows are all equal, gives ~1e6; a z-score of one
  success in 256 rows is ~16 x typical);
* within each group the advantage does not decrease when the reward increases (rows with equal
  rewards may differ: a length-weighted leave-one-out baseline does that);
* every constant group carries one common advantage: 0, or the single global shift a batch
  baseline or a token whitening gives, up to the residue ``tolerances.degenerate_error`` x a
  live group's typical |advantage| allows (float32 rounding).

The three thresholds were calibrated on measured float32/bfloat16 noise of every registry entry and on the
tests' real bugs (``benchmarks/universal_calibration.py``, figures in docs/universal_invariants.md).

Group sizes are the device's ``group_size`` check, and NaN-reward rows carrying advantage 0 its
``unscorable_rows`` check (:data:`UNIVERSAL_PROMISES`): both run whatever the estimator.
"""

from __future__ import annotations

import dataclasses

import numpy as np

#: The universal invariants, as :func:`universal_breach` words them.
UNIVERSAL = (
    "finite and bounded advantages",
    "advantages non-decreasing in reward within each group",
    "one common advantage on every constant group (0 or one global shift)",
)


#: The registry promises every estimator keeps, known or not: NaN-reward (unscorable) rows carry
#: advantage 0 (the monitor's convention; a NaN counted as reward 0 is a bug whatever the estimator).
UNIVERSAL_PROMISES = frozenset({"unscorable_rows"})

#: The largest |advantage| a sane estimator gives, in typical |advantage| units.
MAX_RATIO = 1e3


@dataclasses.dataclass(frozen=True)
class Breach:
    """A universal invariant that broke: what, and the first offending group indices."""

    text: str
    groups: tuple[int, ...]


def universal_breach(rewards: np.ndarray, gid: np.ndarray, adv: np.ndarray, *, monotone_tol: float,
                     constant_tol: float) -> Breach | None:
    """The first universal invariant ``adv`` breaks on ``rewards`` grouped by ``gid``, or None.

    Tolerances are fractions of the typical |advantage| (median over rows of live groups).

    >>> r = np.array([0.0, 1.0, 0.0, 1.0]); g = np.array([0, 0, 1, 1])
    >>> universal_breach(r, g, np.array([-1.0, 1.0, 1.0, -1.0]), monotone_tol=1e-3, constant_tol=0.25).groups
    (1,)
    """
    inv, valid, n, degenerate = grouping(rewards, gid)
    live = valid & ~degenerate[inv] & (n[inv] >= 2)
    vals = np.abs(adv[live])
    typ = float(np.median(vals)) if len(vals) and np.median(vals) > 0 else float(vals.mean()) if len(vals) else 1.0
    typ = typ if typ > 0 else 1.0
    huge = valid & (np.abs(adv) > MAX_RATIO * typ)
    if huge.any():
        return Breach(f"advantages up to {float(np.abs(adv).max()):.4g} ({float(np.abs(adv).max()) / typ:.3g} x "
                      f"typical |advantage| {typ:.4g}, beyond {MAX_RATIO:g} x): a division by a vanishing spread",
                      tuple(int(i) for i in np.unique(inv[huge])[:5]))
    falling = _falling_groups(rewards, inv, adv, live, monotone_tol * typ)
    if falling:
        return Breach(f"advantages fall as the reward rises in {len(falling)} groups (by more than "
                      f"{monotone_tol:g} x typical |advantage| {typ:.4g})", tuple(falling[:5]))
    const = valid & degenerate[inv] & (n[inv] >= 2)
    if const.any():
        common = float(np.median(adv[const]))
        off = np.abs(adv - common) > constant_tol * typ
        bad = np.unique(inv[const & off])
        if len(bad):
            worst = float(np.abs(adv[const] - common).max())
            return Breach(f"constant groups carry different advantages in {len(bad)} groups (up to {worst:.4g} "
                          f"from their common {common:.4g}, {worst / typ:.3g} x typical |advantage|)",
                          tuple(int(i) for i in bad[:5]))
    return None


def grouping(rewards: np.ndarray, gid: np.ndarray) -> tuple[np.ndarray, ...]:
    """Group index of each row (0..k-1, any labels), scorable rows, scorable rows per group, and the groups whose
    scorable rewards are all equal (or that have none)."""
    inv = np.unique(gid, return_inverse=True)[1].reshape(-1)
    valid = ~np.isnan(rewards)
    k = int(inv.max()) + 1 if len(inv) else 0
    hi, lo = np.full(k, -np.inf), np.full(k, np.inf)
    np.maximum.at(hi, inv[valid], rewards[valid])
    np.minimum.at(lo, inv[valid], rewards[valid])
    return inv, valid, np.bincount(inv[valid], minlength=k), ~(hi > lo)


def _falling_groups(r: np.ndarray, inv: np.ndarray, a: np.ndarray, live: np.ndarray, tol: float) -> list[int]:
    """Groups where some row has a lower advantage than a row of strictly lower reward (beyond ``tol``)."""
    idx = np.flatnonzero(live)
    order = idx[np.lexsort((r[idx], inv[idx]))]
    out = []
    bounds = np.flatnonzero(np.diff(inv[order])) + 1
    for rows in np.split(order, bounds):
        if len(rows) < 2:
            continue
        levels, start = np.unique(r[rows], return_index=True)
        hi = np.maximum.reduceat(a[rows], start)
        lo = np.minimum.reduceat(a[rows], start)
        below = np.maximum.accumulate(hi)[:-1]  # the largest advantage of any lower reward level
        if len(levels) > 1 and bool((lo[1:] < below - tol).any()):
            out.append(int(inv[rows[0]]))
    return out
