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

With ``estimator="auto"`` the device fit names a classic convention when one fits;
when none does, the registry is replayed and the estimators that fit (a plausible
stabilizer, at most ``max_stabilizer_ratio`` of the reward std) are locked across steps,
as the classic lock is.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..invariants import DEVICE_PROMISES
from ..invariants.universal import UNIVERSAL, UNIVERSAL_PROMISES, Breach, universal_breach
from .base import Estimator
from .classic import ConventionFit, ConventionTracker, classic_of
from .custom import USER_FUNCTION_FAILED, USER_FUNCTION_HINT
from .defects import matching_defect
from .families import group_stats, layout
from .registry import CUSTOM_ID, ESTIMATORS, get
from .replay import fit as replay_fit
from .rows import Rows, fit_whitened, host_rows, uniform_shift, whitens

#: Under ``"auto"``, once an entry is locked by replay each rollout replays that entry alone; every
#: ``NARROW_EVERY`` rollouts (and whenever the locked entry stops fitting) the full replay of the candidates
#: narrows them again, so a re-identification after a change of estimator starts from a current list.
NARROW_EVERY = 16


def replay_needs(est: Estimator) -> tuple[str, ...]:
    """The ``observe_rollout`` arguments beyond rewards and advantages a replay of ``est`` needs: multi-reward
    ones the reward components, length-weighted baselines the token counts (a whitening is fitted without them).

    >>> replay_needs(get("trl.normalize_then_sum")), replay_needs(get("population"))
    (('reward_components',), ())
    """
    needs_lengths = est.token_weighted and not whitens(est) and est.id != CUSTOM_ID
    return (("reward_components",) if est.multi_reward else ()) + (("lengths",) if needs_lengths else ())


@functools.cache
def ignores_groups(name: str | None) -> bool:
    """Whether the registry entry ``name`` gives the same advantages whatever the grouping (a batch baseline and
    batch scale, or whitening with no group baseline), measured on a probe batch: regrouped, nothing changes.

    >>> ignores_groups("roll.batch_norm"), ignores_groups("trl.batch"), ignores_groups("population")
    (True, False, False)
    """
    if name is None or name not in ESTIMATORS:
        return False
    est = ESTIMATORS[name]
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(24, 2) if est.multi_reward else 24)
    lengths = rng.integers(1, 9, 24).astype(float) if est.token_weighted else None
    split, whole = np.repeat(np.arange(4), 6), np.zeros(24, dtype=np.int64)
    try:
        return bool(np.allclose(est(rewards, split, lengths=lengths), est(rewards, whole, lengths=lengths),
                                rtol=1e-9, atol=1e-12))
    except ValueError:
        return False


def replayable(est: Estimator, rows: Rows | None = None) -> bool:
    """Whether the monitor can replay ``est`` on ``rows`` (:func:`replay_needs` given)."""
    given = {"reward_components": rows is not None and rows.components is not None,
             "lengths": rows is not None and rows.lengths is not None}
    return all(given[n] for n in replay_needs(est))


@dataclasses.dataclass(frozen=True)
class Judgement:
    """The estimator named for one rollout, the invariants it promises, and what broke.

    ``unknown`` is the text of an ``unknown_estimator`` warning: under ``"auto"`` no entry fits but
    the universal invariants hold (``name`` is then None and nothing else is promised).
    """

    name: str | None
    stabilizer: float | None
    promises: frozenset[str]
    problem: str | None = None
    groups: tuple = ()  # first offending group labels of a replay mismatch
    unknown: str | None = None
    hint: str | None = None  # the breach's hint when the registry's does not apply (the user's function raised)


class EstimatorJudge:
    """Judges each checked rollout against the declared estimator, or finds it (``"auto"``).

    Holds the run's lock: the classic conventions consistent so far (device fit), in ``"auto"``
    the registry entries consistent so far (replay), and the name reported so far (``locked``):
    a name that changes is a ``convention`` breach.
    """

    def __init__(self, config: Any):
        self.config = config
        name = config.estimator
        self.declared = None if name == "auto" else get(name)
        classic = classic_of(self.declared) if self.declared is not None else None
        self.device = self.declared is None or classic is not None
        device_config = config
        if classic is not None:
            conv, eps = classic
            stab = config.stabilizer if config.stabilizer is not None else eps
            device_config = config.model_copy(update={"estimator": conv, "stabilizer": stab})
        self.conventions = ConventionTracker(device_config)
        self.replayed: tuple[str, ...] | None = None  # "auto": registry entries fitting every step so far
        self.locked: str | None = None  # "auto": the name reported so far
        self.since_narrowed = 0  # "auto": rollouts judged on the locked entry alone since the last full replay

    def judged(self, rollout: dict[str, float], records: Sequence[Any], breached: frozenset[str] = frozenset()
               ) -> tuple[Judgement | None, EstimatorJudge]:
        """:meth:`judge` without changing this lock: the judgement and the lock it narrows to (a new judge).

        Every change :meth:`judge` makes rebinds an attribute (``candidates``, ``replayed``,
        ``locked``), so shallow copies of this judge and its tracker are a lock of their own.
        """
        after = copy.copy(self)
        after.conventions = copy.copy(self.conventions)
        return after.judge(rollout, records, breached), after

    def judge(self, rollout: dict[str, float], records: Sequence[Any], breached: frozenset[str] = frozenset()
              ) -> Judgement | None:
        """The judgement of one checked rollout slice; None when no live group carries advantages.

        ``breached`` names the device invariants this slice broke: under ``"auto"`` a classic
        fit that comes with broken promises, or that only the batch scale explains, is checked
        against the registry by replay too.
        """
        fit = self.conventions.update(rollout) if self.device else None
        if self.declared is not None:
            if self.device:
                return self._from_device(fit, self.declared)
            return self._replay_declared(self.declared, records, rollout)
        if fit is None:
            return None
        if fit.fitting and fit.name != "batch" and not (breached & set(DEVICE_PROMISES)):
            return self._hold(self._from_device(fit, None), fit.fitting)
        return self._auto_replay(records, fit, breached)

    # ----------------------------------------------------------------- device
    def _from_device(self, fit: ConventionFit | None, est: Estimator | None) -> Judgement | None:
        if fit is None:
            return None
        name = est.name if est is not None else fit.name
        promises = est.promises if est is not None else ESTIMATORS["population"].promises
        return Judgement(name, fit.stabilizer, promises, fit.problem)

    def _hold(self, j: Judgement | None, fitting: Sequence[str]) -> Judgement | None:
        """The lock on the reported name: the locked one while it still fits; a change is a problem."""
        if j is None or j.name is None or j.problem:
            return j
        if self.locked is None or self.locked == j.name:
            self.locked = j.name
            return j
        if self.locked in fitting:
            return dataclasses.replace(j, name=self.locked, promises=get(self.locked).promises)
        was, self.locked = self.locked, j.name
        return dataclasses.replace(j, problem=f"the estimator changed between steps: was {was}, now fits "
                                              f"{list(fitting)[:4]}")

    # ----------------------------------------------------------------- replay
    def _locked_fits(self, rows: Rows) -> bool:
        """Whether this step may judge the locked entry alone: one is locked, it is among the entries that fit
        so far, the candidates were narrowed less than :data:`NARROW_EVERY` rollouts ago, and its replay fits.

        While it fits, replaying every candidate reports the same judgement (:meth:`_hold` keeps a locked name
        that still fits); only the candidate list, kept for a re-identification, would narrow, which the full
        replay every :data:`NARROW_EVERY` rollouts, and at the first misfit, does.
        """
        name = self.locked
        if name is None or self.replayed is None or name not in self.replayed or self.since_narrowed >= NARROW_EVERY:
            return False
        if not replayable(ESTIMATORS[name], rows):
            return False
        self.since_narrowed += 1
        return bool(_fitting(rows, [name], self._tolerance(), self.config))

    def _tolerance(self) -> float:
        return self.config.tolerances.estimator_residual

    def _replay_declared(self, est: Estimator, records: Sequence[Any], rollout: dict[str, float]) -> Judgement | None:
        if rollout.get("live", 0) < 1 or rollout.get("adv_rows", 0) < 1:
            return None
        rows = host_rows(records)
        if not replayable(est, rows):
            return Judgement(est.name, None, est.promises)  # promises only: it needs the reward components
        if not rows.replayable:
            return None
        residual, per_group, group_ids, eps, error = _replay(est, rows)
        labels = rows.labels
        if error is None and residual <= self._tolerance():
            return Judgement(est.name, eps, est.promises)
        worst = np.argsort(-np.nan_to_num(per_group, nan=np.inf))[:5]
        groups = tuple(labels[int(group_ids[i])] for i in worst if not per_group[i] <= self._tolerance())
        why = error or (f"max group rms residual {residual:.3g} x typical |advantage| against "
                        f"{est.name} ({est.description})")
        hint = USER_FUNCTION_HINT if error is not None and error.startswith(USER_FUNCTION_FAILED) else None
        return Judgement(est.name, eps, est.promises, f"declared std_convention={est.name!r} but {why}", groups,
                         hint=hint)

    def _auto_replay(self, records: Sequence[Any], fit: ConventionFit, breached: frozenset[str] = frozenset()
                     ) -> Judgement | None:
        rows = host_rows(records)
        if not rows.replayable:
            return self._from_device(fit, None)
        if self._locked_fits(rows):  # the judgement the whole replay gives while the locked entry fits
            assert self.locked is not None, "_locked_fits"
            return Judgement(self.locked, None, ESTIMATORS[self.locked].promises)
        self.since_narrowed = 0
        every = [n for n in ESTIMATORS if replayable(ESTIMATORS[n], rows)]
        found = _fitting(rows, [n for n in (self.replayed or every) if n in every], self._tolerance(), self.config)
        if self.replayed is not None and not found:  # the locked ones stopped fitting: try every entry
            found = _fitting(rows, every, self._tolerance(), self.config)
        if found:
            found = sorted(found, key=lambda n: n not in fit.fitting)  # a classic fit confirmed by replay first
            self.replayed = tuple(found)
            return self._hold(Judgement(found[0], None, ESTIMATORS[found[0]].promises), found)
        if fit.fitting:  # nothing in the registry either: the device's verdict stands
            return self._hold(self._from_device(fit, None), fit.fitting)
        return self._unknown(rows, every, fit, breached)

    def _unknown(self, rows: Rows, names: Sequence[str], fit: ConventionFit, breached: frozenset[str]
                 ) -> Judgement | None:
        """No entry fits: an ``unknown_estimator`` warning when the universal invariants hold, else the error
        (every device check counts then, as when nothing is known)."""
        tol = self.config.tolerances
        a = rows.advantages
        assert a is not None, "replayed rows have advantages (Rows.replayable)"
        breach = universal_breach(rows.rewards, rows.gid, a, monotone_tol=tol.affine_residual,
                                  constant_tol=tol.degenerate_error)
        if breach is None and breached & UNIVERSAL_PROMISES:
            breach = Breach("NaN-reward rows carry nonzero advantages", ())
        if breach is not None:
            j = self._from_device(fit, None)
            assert j is not None, "fit is not None"
            groups = tuple(rows.labels[i] for i in breach.groups)
            return dataclasses.replace(j, problem=f"{fit.problem}; and {breach.text}, which no estimator does",
                                       groups=groups)
        defect = matching_defect(rows.rewards, rows.gid, a, rows.lengths, self._tolerance())
        if defect is not None:  # finite and monotone, but a shape known to be broken: an error naming it
            return Judgement(None, None, UNIVERSAL_PROMISES, defect.text(), hint=defect.hint())
        if self.locked is not None:
            return Judgement(self.locked, None, UNIVERSAL_PROMISES, f"the estimator changed between steps: was "
                             f"{self.locked}, now no registry entry fits (the universal invariants still hold)")
        return Judgement(None, None, UNIVERSAL_PROMISES, unknown=_unknown_text(rows, names, self._tolerance(),
                                                                             tol.max_stabilizer_ratio))

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {**self.conventions.state_dict(), "replayed": list(self.replayed) if self.replayed else None,
                "locked": self.locked}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.conventions.load_state_dict(state)
        replayed = state.get("replayed")
        self.replayed = tuple(replayed) if replayed else None
        self.locked = state.get("locked")


def _replay(est: Estimator, rows: Rows):
    """(residual, per-group residuals, group ids, fitted eps, error) of one declared estimator on the rows.

    A token-whitening registry entry without token counts is fitted up to its unknown offset and
    scale (a user's own function is called without them). Groups without reward variation are
    left to the ``degenerate_zero`` check when the estimator promises it (its float32 residue rule).
    """
    r, g, a = rows.rewards, rows.gid, rows.advantages
    assert a is not None, "replayed rows have advantages (Rows.replayable)"
    if rows.lengths is None and whitens(est):
        data, fixed = _inputs(est, rows)
        residual, per_group, groups = fit_whitened(_with(est, fixed), data, g, a)
        return residual, per_group, groups, est.params.get("eps"), None
    data, fixed = _inputs(est, rows)
    f = replay_fit(est, data, g, a, lengths=rows.lengths, fixed=fixed)
    per_group = f.group_residuals
    if "degenerate_zero" in est.promises and f.error is None:
        live = ~group_stats(layout(r, g), r).degenerate
        per_group = np.where(live, per_group, 0.0)
    return (float(per_group.max(initial=0.0)), per_group, f.groups, f.params.get("eps", est.params.get("eps")),
            f.error)


def _with(est: Estimator, fixed: dict[str, Any] | None) -> Estimator:
    return dataclasses.replace(est, params={**est.params, **fixed}) if fixed else est


def _inputs(est: Estimator, rows: Rows) -> tuple[np.ndarray, dict[str, Any] | None]:
    """The rewards a replay of ``est`` takes (the components for a multi-reward one) and fixed parameters."""
    if est.multi_reward and rows.components is not None:
        return rows.components, ({"weights": rows.weights} if rows.weights is not None else None)
    return rows.rewards, None


def _fitting(rows: Rows, names: Sequence[str], tol: float, config: Any) -> list[str]:
    """Registry entries whose exact replay fits with a plausible stabilizer: exact replays first, then
    those with a free offset and scale, each in id order (every fit is within tolerance: the order only
    has to be the same for any row order).

    Token-whitening entries replay with the rows' token counts; without them, with their offset
    and scale fitted (one global affine map of the group step: AReaL's signature; a forgotten
    centring is a per-group offset, which no global map explains, and the group step plus a
    constant, slope exactly 1, is an added term, not a whitening). Multi-reward entries replay
    on the rollout's reward components.
    """
    ratio = config.tolerances.max_stabilizer_ratio
    assert rows.advantages is not None, "replayed rows have advantages (Rows.replayable)"
    out = []
    for n in names:
        est = ESTIMATORS[n]
        if rows.lengths is None and whitens(est):
            residual, _, _, _, _ = _replay(est, rows)
            shift = uniform_shift(est, rows.rewards, rows.gid, rows.advantages, config.tolerances.zero_group_mean)
            if residual <= tol and not shift:
                out.append((1, est.id, n))  # two parameters fitted freely: after every exact replay
            continue
        data, fixed = _inputs(est, rows)
        f = replay_fit(est, data, rows.gid, rows.advantages, lengths=rows.lengths, fixed=fixed)
        if f.fits(tol, ratio):
            out.append((0, est.id, n))
    return [n for *_, n in sorted(out)]


def _nearness(f: Any, tol: float, ratio: float) -> str:
    """How far one entry is: its misfit, or, when it fits only with an implausibly large stabilizer, that eps."""
    eps = f.params.get("eps")
    if f.fits(tol) and not f.fits(tol, ratio):
        return f"fits only with eps={eps:.3g}, {eps / f.reward_std:.3g} x the reward std: too large for a stabilizer"
    return f"{f.residual:.2g} x typical |advantage| off"


def _unknown_text(rows: Rows, names: Sequence[str], tol: float, ratio: float) -> str:
    """The ``unknown_estimator`` message: the nearest entries and how to declare yours."""
    near = []
    for n in names:
        data, fixed = _inputs(ESTIMATORS[n], rows)
        f = replay_fit(ESTIMATORS[n], data, rows.gid, rows.advantages, lengths=rows.lengths, fixed=fixed)
        if np.isfinite(f.residual):
            near.append((f.residual, n, _nearness(f, tol, ratio)))
    nearest = ", ".join(f"{n} ({how})" for _, n, how in sorted(near)[:3]) or "none"
    return (f"no registry estimator reproduces these advantages (to {tol:g} x typical |advantage|), but the "
            f"universal invariants hold ({'; '.join(UNIVERSAL)}); nearest: {nearest}. Declare yours to check it "
            "exactly: MonitorConfig(estimator=your_fn) or grpo_monitor.estimators.custom(fn, name=...)")
