"""One record per advantage estimator: its float64 reference, free parameters, promises, source.

Every reference maps ``rewards (N,) float64`` (NaN = unscorable row) and a group index
``gid (N,) int`` to advantages ``(N,)``. NaN rows get advantage 0 and stay out of their
group's statistics (the monitor's convention; most frameworks have no unscorable rows,
TRL's is the same). When rewards are finite the reference reproduces the framework.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..invariants import PROMISES as _PROMISES

#: What an estimator may promise: the invariants whose record carries a promise, plus ``batch_zero_mean``,
#: which only judges an estimator (one home: :mod:`grpo_monitor.invariants`). Every promise is about
#: batches in which each group has at least two scorable rows; groups with one scorable row follow
#: ``Estimator.singleton``.
PROMISES: dict[str, str] = _PROMISES

#: What a one-scorable-row group gets, by ``Estimator.singleton``.
SINGLETONS: dict[str, str] = {
    "zero": "advantage 0",
    "raw": "mean 0 and std 1 (verl's fallback): the row keeps its reward, over 1 + eps where the group std divides",
    "error": "the framework raises on a group of one row; the reference raises too "
    "(a group left with one scorable row by NaN rewards gets 0)",
}


#: ``grpo/adv/estimator_id`` of a user-declared estimator (:func:`~grpo_monitor.estimators.custom`).
CUSTOM_ID = -2
#: ``grpo/adv/estimator_id`` when no estimator is named (none fits, or the check broke).
UNKNOWN_ID = -1


@dataclasses.dataclass(frozen=True)
class Estimator:
    """An advantage estimator: a pure float64 reference plus what it promises and where it comes from.

    ``params`` are the defaults the framework uses (``eps`` is the stabilizer, ``stabilizer``
    says where it enters, ``ddof`` which std); ``fit_param`` names the one a replay fits
    (``None`` when nothing is free) and ``eps_power`` is ``p`` when ``1 / |a|**p`` is affine
    in it (closed-form fit), ``None`` when a 1-D search is needed. ``multi_reward``
    estimators take ``rewards (N, K)`` and a ``weights`` parameter; ``token_weighted`` ones
    accept ``lengths (N,)``; ``reward_domain`` is where the promises hold ("real" or
    "nonnegative"); ``id`` is the entry's stable integer id, recorded in
    :data:`~grpo_monitor.estimators.registry.ESTIMATOR_IDS` (``CUSTOM_ID`` for a user's own).
    """

    name: str
    reference: Callable[..., np.ndarray]
    params: Mapping[str, Any]
    promises: frozenset[str]
    source: str
    description: str
    singleton: str = "zero"
    fit_param: str | None = "eps"
    eps_power: int | None = 1
    multi_reward: bool = False
    token_weighted: bool = False
    reward_domain: str = "real"
    id: int | None = None  # the stable integer id (``grpo/adv/estimator_id``); set by the registry

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", types.MappingProxyType(dict(self.params)))
        unknown = set(self.promises) - set(PROMISES)
        if unknown:
            raise ValueError(
                f"estimator {self.name!r} promises {sorted(unknown)}; expected names from {list(PROMISES)}"
            )
        if self.singleton not in SINGLETONS:
            raise ValueError(
                f"estimator {self.name!r} has singleton={self.singleton!r}; expected one of {list(SINGLETONS)}"
            )
        if self.fit_param is not None and self.fit_param not in self.params:
            raise ValueError(f"estimator {self.name!r} fits {self.fit_param!r}, which is not one of its params")

    @property
    def doc(self) -> str:
        """A docstring for the entry: formula, defaults, promises, one-row groups, source."""
        params = ", ".join(f"{k}={v!r}" for k, v in self.params.items()) or "none"
        return (f"{self.name}: {self.description}.\nParameters (defaults): {params}.\n"
                f"Promises: {', '.join(sorted(self.promises))}.\nOne-row groups: {SINGLETONS[self.singleton]}.\n"
                f"Reproduces: {self.source}.")

    @property
    def framework(self) -> str:
        """The framework part of the dotted name (``"generic"`` for undotted names)."""
        return self.name.split(".", 1)[0] if "." in self.name else "generic"

    def __call__(
        self, rewards: Any, gid: Any, *, lengths: Any = None, **overrides: Any
    ) -> np.ndarray:
        """Advantages ``(N,)`` float64 for ``rewards`` grouped by ``gid``; ``overrides`` replace default params.

        ``lengths`` (token counts) is used by token-weighted estimators and ignored by the others.
        """
        r, g = check_inputs(self, rewards, gid)
        params = self.resolve(overrides)
        weights = params.get("weights")
        if self.multi_reward and weights is not None and len(weights) != r.shape[1]:
            raise ValueError(
                f"weights has {len(weights)} entries but rewards has {r.shape[1]} columns; pass one per column"
            )
        if self.token_weighted:
            params["lengths"] = None if lengths is None else check_lengths(lengths, len(g))
        return self.reference(r, g, **params)

    def resolve(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """The defaults with ``overrides`` applied; unknown names are a worded error."""
        unknown = sorted(set(overrides) - set(self.params))
        if unknown:
            raise ValueError(
                f"unknown parameter(s) {unknown} for estimator {self.name!r}; expected some of {sorted(self.params)}"
            )
        return {**self.params, **overrides}

    def row_rewards(self, rewards: Any, **overrides: Any) -> np.ndarray:
        """The one reward per row the monitor sees: the rewards, or for multi-reward
        estimators the weighted sum of the columns (NaN cells count 0; NaN when all are)."""
        r = np.asarray(rewards, dtype=np.float64)
        if not self.multi_reward:
            return r
        w = self.resolve(overrides).get("weights")
        w = np.ones(r.shape[1]) if w is None else np.asarray(w, dtype=np.float64)
        return np.where(np.isnan(r).all(axis=1), np.nan, np.nan_to_num(r, nan=0.0) @ w)


def check_inputs(est: Estimator, rewards: Any, gid: Any) -> tuple[np.ndarray, np.ndarray]:
    """``rewards`` as float64 and ``gid`` as int64, or a ValueError naming what was expected."""
    r = np.asarray(rewards, dtype=np.float64)
    g = np.asarray(gid)
    want = "(N, K) with K reward columns" if est.multi_reward else "(N,)"
    if r.ndim != (2 if est.multi_reward else 1):
        raise ValueError(f"rewards has shape {r.shape} but estimator {est.name!r} expects {want}")
    if g.ndim != 1 or len(g) != len(r):
        raise ValueError(f"gid has shape {g.shape} but rewards has {len(r)} rows; pass one group index per row")
    if g.size and not np.issubdtype(g.dtype, np.integer):
        raise ValueError(f"gid has dtype {g.dtype}; expected integer group indices (map uids with np.unique first)")
    if np.isinf(r).any():
        rows = np.flatnonzero(np.isinf(r).reshape(len(r), -1).any(axis=1))[:5].tolist()
        raise ValueError(f"rewards hold infinite values at rows {rows}; mark unscorable rows with NaN instead")
    return r, g.astype(np.int64)


def check_lengths(lengths: Any, n: int) -> np.ndarray:
    """Token counts ``(N,)``, finite and >= 0, or a ValueError."""
    w = np.asarray(lengths, dtype=np.float64)
    if w.shape != (n,):
        raise ValueError(f"lengths has shape {w.shape} but rewards has {n} rows; pass one token count per row")
    if not np.isfinite(w).all() or (w < 0).any():
        raise ValueError("lengths must be finite token counts >= 0")
    return w


#: Every user-declared estimator by name (``ESTIMATORS`` holds the shipped ones); filled by ``custom``.
CUSTOM: dict[str, Estimator] = {}
