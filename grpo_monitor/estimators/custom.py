"""Your own estimator as the reference: ``custom(fn, name=..., promises=...)``.

``fn`` has the signature ``grpo-monitor audit`` takes: ``rewards (B, G) -> advantages (B, G)``
(torch tensors), optionally with keyword arguments ``lengths`` (token counts ``(B, G)``) and
``eps`` (a stabilizer with a numeric default, fitted on replay as for registry entries). The
monitor replays it in float64 on the observed rewards (NaN marks an unscorable row, as in your
trainer) and compares, group by group, with the advantages the trainer produced. Groups of
unequal size are replayed one size at a time.

The returned :class:`~grpo_monitor.estimators.Estimator` is registered under ``name`` in
:data:`CUSTOM`, so ``MonitorConfig(estimator=name)``, a saved ``state_dict`` and every
integration refer to it by name; ``MonitorConfig(estimator=fn)`` calls :func:`custom`.

>>> import torch
>>> est = custom(lambda r: r - r.mean(1, keepdim=True), name="my.centred")
>>> sorted(est.promises)
['affine_in_rewards', 'batch_zero_mean', 'degenerate_zero', 'zero_group_mean']
>>> est(np.array([1.0, 0.0, 0.5, 0.5]), np.array([0, 0, 1, 1])).tolist()
[0.5, -0.5, 0.0, 0.0]
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from ..errors import EstimatorFunctionError as EstimatorFunctionError  # its home; this old path keeps working
from .base import CUSTOM, CUSTOM_ID, PROMISES, Estimator
from .families import group_stats, layout

_TOL = 1e-6  # a promise holds on the probes to this x typical |advantage| (float64 arithmetic)


def custom(fn: Callable[..., Any], *, name: str | None = None, promises: Iterable[str] | None = None) -> Estimator:
    """Declare ``fn`` (``rewards (B, G) -> advantages (B, G)``) as an estimator called ``name``.

    ``promises`` default to those ``fn``'s own outputs keep on probe batches (0/1, continuous,
    graded and constant groups, NaN rows); pass them to override. Declaring a name again
    replaces the earlier function. A registry name cannot be reused.
    """
    from .registry import ESTIMATORS

    if isinstance(fn, Estimator) or not callable(fn):
        raise TypeError(f"fn must be a function rewards (B, G) -> advantages (B, G), got {type(fn).__name__}")
    label = name if name is not None else _default_name(fn)
    if not isinstance(label, str) or not label or label == "auto" or label in ESTIMATORS:
        raise ValueError(f"name must be a new non-empty string (not 'auto' or a registry name), got {label!r}")
    takes = _keywords(fn)
    eps = takes.get("eps")
    params = {"eps": float(eps)} if isinstance(eps, (int, float)) and not isinstance(eps, bool) else {}
    ref = _Reference(fn, "lengths" in takes)
    source = f"user function {ref.label}"
    draft = Estimator(label, ref, params, frozenset(), source, f"your own estimator {label}",
                      fit_param="eps" if params else None, eps_power=None, token_weighted=ref.lengths, id=CUSTOM_ID)
    shown = frozenset(promises) if promises is not None else observed_promises(draft)
    unknown = sorted(shown - set(PROMISES))
    if unknown:
        raise ValueError(f"promises {unknown} are not known; expected names from {sorted(PROMISES)}")
    est = Estimator(label, ref, params, shown, source, draft.description, fit_param=draft.fit_param,
                    eps_power=None, token_weighted=ref.lengths, id=CUSTOM_ID)
    CUSTOM[label] = est
    return est


def _default_name(fn: Callable[..., Any]) -> str:
    return f"custom.{getattr(fn, '__module__', 'fn')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def _keywords(fn: Callable[..., Any]) -> dict[str, Any]:
    """The keyword arguments ``fn`` accepts among ``lengths`` and ``eps``, with their defaults."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return {}
    return {k: p.default for k, p in sig.parameters.items() if k in ("lengths", "eps")
            and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}


#: How a replay error caused by the user's own function begins (the judge words its hint from it).
USER_FUNCTION_FAILED = "your estimator function "
USER_FUNCTION_HINT = ("your own estimator function raised on the observed rewards: fix it (or declare a registry "
                      "name); the estimator check cannot run until it returns advantages")


class _Reference:
    """``fn`` as a registry reference: flat float64 rows and a group index in, flat float64 out."""

    def __init__(self, fn: Callable[..., Any], lengths: bool):
        self.fn, self.lengths = fn, lengths
        self.label = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"

    def _call(self, grid: torch.Tensor, **kw: Any) -> Any:
        """``fn(grid, **kw)``; whatever it raises is :class:`EstimatorFunctionError` naming it and the exception."""
        try:
            return self.fn(grid, **kw)
        except Exception as exc:  # noqa: BLE001 - the user's function may fail in any way: theirs to fix
            raise EstimatorFunctionError(
                f"{USER_FUNCTION_FAILED}{self.label} raised {type(exc).__name__}: {exc} (on rewards of shape "
                f"{tuple(grid.shape)}); fix the function or pass the estimator's registry name") from exc

    def __call__(self, rewards: np.ndarray, gid: np.ndarray, lengths: np.ndarray | None = None,
                 **params: Any) -> np.ndarray:
        lay = layout(rewards, gid)
        out = np.zeros(len(rewards))
        for size in np.unique(lay.rows):  # one call per group size: a (B, G) batch each
            groups = np.flatnonzero(lay.rows == size)
            rows = np.isin(lay.inv, groups)
            dense = np.searchsorted(groups, lay.inv[rows])
            grid = np.full((len(groups), int(size)), np.nan)
            grid[dense, lay.pos[rows]] = rewards[rows]
            kw = dict(params)
            if self.lengths and lengths is not None:
                lens = np.zeros_like(grid)
                lens[dense, lay.pos[rows]] = lengths[rows]
                kw["lengths"] = torch.from_numpy(lens)
            adv = _as_numpy(self._call(torch.from_numpy(grid), **kw), grid.shape)
            out[rows] = adv[dense, lay.pos[rows]]
        nan = np.isnan(rewards)
        bad = ~np.isfinite(out) & ~nan
        if bad.any():
            raise ValueError(f"the declared function returned non-finite advantages at rows "
                             f"{np.flatnonzero(bad)[:5].tolist()} for finite rewards")
        return np.where(nan, np.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0), out)


def _as_numpy(out: Any, shape: tuple[int, ...]) -> np.ndarray:
    if isinstance(out, torch.Tensor):
        out = out.detach().to(torch.float64).cpu().numpy()
    arr = np.asarray(out, dtype=np.float64)
    if arr.shape != shape:
        raise ValueError(f"the declared function returned shape {arr.shape} for rewards of shape {shape}; "
                         "return one advantage per reward")
    return arr


# ------------------------------------------------------------------------------- promises
def _probes(seed: int = 0) -> list[np.ndarray]:
    """0/1, continuous, graded, constant-among-live and NaN-row batches, ``(B, G)`` float64."""
    rng = np.random.default_rng(seed)
    binary = (rng.random((12, 6)) < 0.5).astype(float)
    binary[0], binary[1] = 1.0, 0.0
    graded = rng.integers(0, 5, (12, 6)) / 4.0
    graded[2] = 0.7
    constant = np.vstack([np.full((3, 6), c) for c in (0.7, 1 / 3, 40.0)] + [rng.normal(50, 20, (6, 6))])
    nan = binary.copy()
    nan[2:8:2, 0] = np.nan
    return [binary, rng.normal(0.3, 1.0, (12, 6)), graded, constant, nan]


def observed_promises(est: Estimator) -> frozenset[str]:
    """The promises of :data:`~grpo_monitor.estimators.PROMISES` that ``est``'s outputs keep on every probe.

    A function that fails on a probe promises nothing (its error surfaces when it is replayed).
    """
    held = set(PROMISES) - {"one_nonzero_per_group"}
    for grid in _probes():
        gid = np.repeat(np.arange(grid.shape[0]), grid.shape[1])
        r = grid.reshape(-1)
        try:
            a = est(r, gid)
        except Exception:  # noqa: BLE001 - the user's function may fail in any way
            if np.isnan(r).any():  # NaN rewards propagate or raise: it promises nothing about them
                held.discard("unscorable_rows")
                continue
            return frozenset()
        held &= _kept(r, gid, a, est)
    return frozenset(held)


def _kept(r: np.ndarray, gid: np.ndarray, a: np.ndarray, est: Estimator) -> set[str]:
    valid = ~np.isnan(r)
    out = {"zero_group_mean", "affine_in_rewards", "degenerate_zero", "batch_zero_mean", "unscorable_rows"}
    scale = _typical(r, gid, a)
    for g in np.unique(gid):
        rows = (gid == g) & valid
        rg, ag = r[rows], a[rows]
        if len(rg) < 2 or rg.max() == rg.min():
            if np.abs(ag).max(initial=0.0) > _TOL * scale:
                out.discard("degenerate_zero")
            continue
        if abs(ag.mean()) > _TOL * scale:
            out.discard("zero_group_mean")
        c = rg - rg.mean()
        k = (c @ (ag - ag.mean())) / (c @ c)
        if k <= 0 or np.sqrt(np.mean((ag - ag.mean() - k * c) ** 2)) > _TOL * scale:
            out.discard("affine_in_rewards")
    if abs(a[valid].mean()) > _TOL * scale:
        out.discard("batch_zero_mean")
    if (~valid).any():
        kept = est(r[valid], gid[valid])
        if np.abs(a[~valid]).max() > _TOL * scale or np.abs(a[valid] - kept).max() > _TOL * scale:
            out.discard("unscorable_rows")
    return out


def _typical(r: np.ndarray, gid: np.ndarray, a: np.ndarray) -> float:
    """Median |advantage| over the scorable rows of groups with reward variation (their mean, or 1, when 0)."""
    lay = layout(r, gid)
    st = group_stats(lay, r)
    vals = np.abs(a[lay.valid & ~st.degenerate[lay.inv]])
    return float(np.median(vals)) if len(vals) and np.median(vals) > 0 else float(vals.mean()) if len(vals) and \
        vals.mean() > 0 else 1.0
