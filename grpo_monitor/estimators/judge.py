"""Which estimator produced a step's advantages, and which invariants it promises: the monitor's side.

Two ways to judge a rollout, chosen per estimator:

- **On the device** (fast, no host copy of the rows): estimators that are a group-mean
  baseline divided by a group or batch std plus a stabilizer, or plain centring, or RLOO
  (``classic_of`` maps them to ``population``/``bessel``/``none``/``leave_one_out``/``batch``
  with a fixed stabilizer). The per-group affine fit on the device already decides them.
- **By replay** (everything else: per-row leave-one-out std, pass@k, mean-scaled,
  whitening): the rows come to the host and :func:`~grpo_monitor.estimators.replay.fit`
  compares the advantages with the estimator's float64 reference on the same rewards,
  stabilizer fitted in closed form, residual per group over the typical |advantage|.

With ``std_convention="auto"`` the device fit names a classic convention when one fits;
when none does, the registry is replayed and the estimators that fit (a plausible
stabilizer, at most ``max_stabilizer_ratio`` of the reward std) are locked across steps,
as the classic lock is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..catalog.invariants import DEVICE_PROMISES
from .base import Estimator
from .classic import ConventionFit, ConventionTracker, classic_of
from .registry import ESTIMATORS, get
from .replay import fit as replay_fit


#: Promises the device-side checks can enforce, by invariant name.
def replayable(est: Estimator) -> bool:
    """Whether the monitor can replay ``est`` from one reward per row (multi-reward estimators need columns)."""
    return not est.multi_reward


def fit_whitened(est: Estimator, r: np.ndarray, g: np.ndarray, a: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """A token-whitening estimator replayed without token counts: ``a = alpha ref + beta``, fitted.

    Whitening over tokens is ``(x - mu) / sigma`` with ``mu`` and ``sigma`` weighted by each
    row's token count, which the rollout does not carry; any weights give the same ``x`` up
    to one affine map, so ``alpha > 0`` and ``beta`` are fitted by least squares over the
    scorable rows. Returns (max group residual / typical |advantage|, per-group residuals, groups).
    """
    ref = est(r, g)
    valid = ~np.isnan(r)
    x, y = ref[valid], a[valid]
    design = np.stack([x, np.ones_like(x)], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(design, y, rcond=None)
    groups, inv = np.unique(g[valid], return_inverse=True)
    resid = y - (alpha * x + beta)
    rms = np.sqrt(np.bincount(inv, resid * resid) / np.maximum(np.bincount(inv), 1))
    live = np.bincount(inv, np.abs(x - np.bincount(inv, x)[inv] / np.bincount(inv)[inv])) > 0
    typ = float(np.median(np.abs(y[live[inv]]))) if live.any() else 1.0
    per_group = rms / (typ if typ > 0 else 1.0)
    if not alpha > 0:
        per_group = np.full_like(per_group, np.inf)
    return float(per_group.max(initial=0.0)), per_group, groups


@dataclasses.dataclass(frozen=True)
class Judgement:
    """The estimator named for one rollout, the invariants it promises, and what broke."""

    name: str | None
    stabilizer: float | None
    promises: frozenset[str]
    problem: str | None = None
    groups: tuple = ()  # first offending group labels of a replay mismatch


@dataclasses.dataclass(frozen=True)
class Rows:
    """A rollout's rows on the host: rewards, group index, advantages and token counts (None when any
    call lacked them), and the group labels."""

    rewards: np.ndarray
    gid: np.ndarray
    advantages: np.ndarray | None
    lengths: np.ndarray | None
    labels: list

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
        parts = [getattr(rec, name) for rec in records]
        if any(p is None for p in parts):
            return None
        return host(parts)

    gids, labels, offset = [], [], 0
    for rec in records:
        gids.append(rec.gid.detach().cpu().numpy() + offset)
        labels += list(rec.labels)
        offset += len(rec.labels)
    return Rows(host([rec.rewards for rec in records]), np.concatenate(gids), cat("advantages"), cat("lengths"), labels)


class EstimatorJudge:
    """Judges each checked rollout against the declared estimator, or finds it (``"auto"``).

    Holds the run's lock: the classic conventions consistent so far (device fit) and, in
    ``"auto"`` when none was, the registry entries consistent so far (replay).
    """

    def __init__(self, config: Any):
        self.config = config
        name = config.std_convention
        self.declared = None if name == "auto" else get(name)
        classic = classic_of(self.declared) if self.declared is not None else None
        self.device = self.declared is None or classic is not None
        device_config = config
        if classic is not None:
            conv, eps = classic
            stab = config.stabilizer if config.stabilizer is not None else eps
            device_config = config.model_copy(update={"std_convention": conv, "stabilizer": stab})
        self.conventions = ConventionTracker(device_config)
        self.replayed: tuple[str, ...] | None = None  # "auto": registry entries fitting every step so far

    def judge(self, rollout: dict[str, float], records: Sequence[Any], breached: frozenset[str] = frozenset()
              ) -> Judgement | None:
        """The judgement of one checked rollout slice; None when no live group carries advantages.

        ``breached`` names the device invariants this slice broke: under ``"auto"`` a classic
        fit that comes with broken promises is checked against the registry by replay too.
        """
        fit = self.conventions.update(rollout) if self.device else None
        if self.declared is not None:
            if self.device:
                return self._from_device(fit, self.declared)
            return self._replay_declared(self.declared, records, rollout)
        if fit is None:
            return None
        if fit.fitting and not (breached & set(DEVICE_PROMISES)):
            return self._from_device(fit, None)
        return self._auto_replay(records, fit)

    # ----------------------------------------------------------------- device
    def _from_device(self, fit: ConventionFit | None, est: Estimator | None) -> Judgement | None:
        if fit is None:
            return None
        name = est.name if est is not None else fit.name
        promises = est.promises if est is not None else ESTIMATORS["population"].promises
        return Judgement(name, fit.stabilizer, promises, fit.problem)

    # ----------------------------------------------------------------- replay
    def _tolerance(self) -> float:
        return self.config.tolerances.estimator_residual

    def _replay_declared(self, est: Estimator, records: Sequence[Any], rollout: dict[str, float]) -> Judgement | None:
        if rollout.get("live", 0) < 1 or rollout.get("adv_rows", 0) < 1:
            return None
        if not replayable(est):
            return Judgement(est.name, None, est.promises)  # promises only: needs reward columns or token counts
        rows = host_rows(records)
        if not rows.replayable:
            return None
        residual, per_group, group_ids, eps, error = _replay(est, rows)
        labels = rows.labels
        if error is None and residual <= self._tolerance():
            return Judgement(est.name, eps, est.promises)
        worst = np.argsort(-np.nan_to_num(per_group, nan=np.inf))[:5]
        groups = tuple(labels[int(group_ids[i])] for i in worst if per_group[i] > self._tolerance())
        why = error or (f"max group rms residual {residual:.3g} x typical |advantage| against "
                        f"{est.name} ({est.description})")
        return Judgement(est.name, eps, est.promises, f"declared std_convention={est.name!r} but {why}", groups)

    def _auto_replay(self, records: Sequence[Any], fit: ConventionFit) -> Judgement | None:
        rows = host_rows(records)
        if not rows.replayable:
            return self._from_device(fit, None)
        ratio = self.config.tolerances.max_stabilizer_ratio
        names = [n for n in (self.replayed or ESTIMATORS) if replayable(ESTIMATORS[n])]
        found = _fitting(rows, names, self._tolerance(), ratio)
        if self.replayed is not None and not found:  # the locked ones stopped fitting: try every entry
            every = [n for n in ESTIMATORS if replayable(ESTIMATORS[n])]
            found = _fitting(rows, every, self._tolerance(), ratio)
            if found:
                was = self.replayed[0]
                self.replayed = tuple(found)
                return Judgement(found[0], None, ESTIMATORS[found[0]].promises,
                                 f"the estimator changed between steps: was {was}, now fits {found[:4]}")
        if not found:  # nothing in the registry either: the device's verdict stands
            return self._from_device(fit, None)
        self.replayed = tuple(found)
        return Judgement(found[0], None, ESTIMATORS[found[0]].promises)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {**self.conventions.state_dict(), "replayed": list(self.replayed) if self.replayed else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.conventions.load_state_dict(state)
        replayed = state.get("replayed")
        self.replayed = tuple(replayed) if replayed else None


def _replay(est: Estimator, rows: Rows):
    """(residual, per-group residuals, group ids, fitted eps, error) of one declared estimator on the rows.

    A token-whitening estimator without token counts is fitted up to its unknown offset and scale.
    """
    r, g, a = rows.rewards, rows.gid, rows.advantages
    assert a is not None, "replayed rows have advantages (Rows.replayable)"
    if est.token_weighted and rows.lengths is None:
        residual, per_group, groups = fit_whitened(est, r, g, a)
        return residual, per_group, groups, est.params.get("eps"), None
    f = replay_fit(est, r, g, a, lengths=rows.lengths)
    return f.residual, f.group_residuals, f.groups, f.params.get("eps", est.params.get("eps")), f.error


def _fitting(rows: Rows, names: Sequence[str], tol: float, max_eps_ratio: float) -> list[str]:
    """Registry entries whose exact replay fits with a plausible stabilizer, best first.

    Token-whitening entries replay with the rows' token counts, or with equal weights when
    there are none: without counts their offset would also explain a uniform shift of every
    advantage (a real bug), so "auto" never fits it freely; declare the estimator instead.
    """
    from .replay import candidates

    return candidates(rows.rewards, rows.gid, rows.advantages, tol, lengths=rows.lengths, names=names,
                      max_eps_ratio=max_eps_ratio)
