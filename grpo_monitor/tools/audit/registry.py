"""``grpo-monitor audit`` against the estimator registry: which entries reproduce a function.

The float64 probe runs are replayed against :data:`grpo_monitor.ESTIMATORS`: an entry
matches when, with its stabilizer fitted where the reward std is small, it reproduces every
probe of :data:`MATCH_PROBES` to ``MATCH_TOL`` (the monitor's own replay tolerance).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...config import Tolerances
from ...estimators import ESTIMATORS, Estimator, fit, get
from .probes import Match, reward_components

#: Probes a registry entry must reproduce (float64) to match; the stabilizer is fitted on the first.
MATCH_PROBES = ("scale_down", "continuous", "binary", "constant", "offset", "scale_up")
#: Max per-group rms residual of a replayed entry, x typical |advantage| (the monitor's own tolerance).
MATCH_TOL = Tolerances().estimator_residual
#: A near match: within NEAR_TOL x typical |advantage| of an entry on the probes where lost precision
#: is relative (no offset), but not within MATCH_TOL everywhere.
NEAR_TOL = 0.05
NEAR_PROBES = ("scale_down", "continuous", "binary", "scale_up")


#: probe -> (rewards (N,), gid (N,), advantages (N,), groups with reward variation (B,), reward components
#: (N, K) or None)
Rows = dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]]


def replay_rows(runs: dict[str, tuple[torch.Tensor, torch.Tensor]], sign: float = 1.0,
                components: int | None = None) -> Rows | None:
    """The float64 runs of :data:`MATCH_PROBES` as flat rows (None when one is missing or not finite), with the
    probes' ``components`` reward columns (``--reward-components``) where the function was given them."""
    rows = {}
    for name in MATCH_PROBES:
        if name not in runs or not bool(torch.isfinite(runs[name][1]).all()):
            return None
        r, a = runs[name]
        gid = np.repeat(np.arange(r.shape[0]), r.shape[1])
        live = (r.amax(1) > r.amin(1)).numpy()
        comps = None if components is None else \
            reward_components(r.double(), components).reshape(-1, components).numpy()
        rows[name] = (r.reshape(-1).double().numpy(), gid, sign * a.reshape(-1).double().numpy(), live, comps)
    return rows


def _data(est: Estimator, row: tuple) -> np.ndarray | None:
    """What ``est`` replays on: the reward components for a multi-reward entry (None without them), else rewards."""
    return row[4] if est.multi_reward else row[0]


def replayable(est: Estimator, rows: Rows) -> bool:
    """Whether the rows hold what ``est`` takes: reward components for a multi-reward entry."""
    return not est.multi_reward or next(iter(rows.values()))[4] is not None


def match_estimator(est: Estimator, rows: Rows, tol: float = MATCH_TOL,
                    probes: tuple[str, ...] = MATCH_PROBES) -> Match | None:
    """``est`` with its stabilizer fitted on the small-scale probe, if it then reproduces every probe.

    Only groups with reward variation are scored: what all-equal groups get (exactly 0, or
    a float32 residue) is the ``degenerate_zero`` check's to judge.
    """
    tries: list[dict[str, float]] = [{}]
    if est.fit_param is not None:
        first = rows[MATCH_PROBES[0]]
        found = fit(est, _data(est, first), *first[1:3])
        own = {est.fit_param: float(est.params[est.fit_param])}
        tries = [{k: float(v) for k, v in found.params.items()}, own] if found.error is None else [own]
    for params in tries:  # the fitted stabilizer, then the entry's own (a fit can miss, e.g. where mean_g ~ 0)
        residuals = [probe_residual(est, rows[name], params) for name in probes]
        if all(res <= tol for res in residuals):
            shown = {k: 0.0 if v <= _slack(rows) else v for k, v in params.items()}  # rounding noise reads as 0
            return Match(est.name, est.description, shown, max(residuals), _rank(est, params, rows))
    return None


def _slack(rows: Rows) -> float:
    """A stabilizer this small is rounding noise: far below any in use, at the small-scale probe's reward std."""
    return 1e-6 * float(np.std(rows[MATCH_PROBES[0]][0]))


def probe_residual(est: Estimator, row: tuple, params: dict[str, float]) -> float:
    """The worst rms residual of a group with reward variation, x typical |advantage| (inf if ``est`` refuses)."""
    f = fit(est, _data(est, row), *row[1:3], free=False, fixed=params)
    return math.inf if f.error is not None else float(f.group_residuals[row[3]].max(initial=0.0))


def _rank(est: Estimator, params: dict[str, float], rows: Rows) -> int:
    """0: the entry's own stabilizer (or one fitted at 0 for a generic convention); 1: nothing free;
    2: a generic convention with a fitted stabilizer; 3: a framework entry that needed another stabilizer."""
    if est.fit_param is None:
        return 1
    value, default, slack = params[est.fit_param], float(est.params[est.fit_param]), _slack(rows)
    if est.framework == "generic":
        return 0 if value <= slack else 2
    return 0 if abs(value - default) <= 0.1 * default + slack else 3


def registry_matches(rows: Rows | None, tol: float = MATCH_TOL, probes: tuple[str, ...] = MATCH_PROBES
                     ) -> list[Match]:
    """Every entry that reproduces the rows, best first (by :func:`_rank`, then registry order); the multi-reward
    ones when the rows carry reward components.

    First the entries whose own stabilizer reproduces the function (``verl.grpo`` for
    torch.std + 1e-6), then those with nothing free, then generic conventions with a fitted
    stabilizer; the framework entries that needed a stabilizer other than theirs only when
    nothing else fits.
    """
    if rows is None:
        return []
    pool = [est for est in ESTIMATORS.values() if replayable(est, rows)]
    found = [m for est in pool if (m := match_estimator(est, rows, tol, probes))]
    found.sort(key=lambda m: m.rank)
    return [m for m in found if m.rank < 3] or found


def expected_fits(name: str, rows: Rows | None, tol: float = MATCH_TOL) -> bool:
    """Whether ``name`` reproduces the rows: with its own stabilizer (framework), or a fitted one (generic)."""
    est = get(name)
    if rows is None or not replayable(est, rows):
        return False
    if est.framework == "generic":
        return match_estimator(est, rows, tol) is not None
    return all(probe_residual(est, rows[p], {}) <= tol for p in MATCH_PROBES)


def near_match(rows: Rows | None, descriptions: dict[str, str]) -> str | None:
    """When no entry reproduces the rows but one comes within :data:`NEAR_TOL` where precision loss is
    relative: which one, and on which probe it is off by how much (``descriptions``: probe -> text)."""
    near = registry_matches(rows, tol=NEAR_TOL, probes=NEAR_PROBES)
    if not near or rows is None:
        return None
    best, est = near[0], get(near[0].name)
    worst = max(MATCH_PROBES, key=lambda p: probe_residual(est, rows[p], best.params))
    off = probe_residual(est, rows[worst], best.params)
    return (f"close to {describe(best)}, but {off:.2g} x typical |advantage| off on the {worst} probe "
            f"({descriptions[worst]}): precision lost (a bfloat16/float16 cast, a one-pass variance "
            f"E[r^2] - E[r]^2) or a small extra term")


def describe(m: Match) -> str:
    """``verl.grpo: (r - mean_g) / (torch.std_g + 1e-6) ... (eps fitted 1.0e-06)``."""
    fitted = ", ".join(f"{k} fitted {v:.1e}" for k, v in m.params.items())
    return f"{m.name}: {m.description}" + (f" ({fitted})" if fitted else "")


