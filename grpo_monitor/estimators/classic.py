"""The five classic estimators (population, bessel, none, leave_one_out, batch), host side: their one home.

Which registry entries the device-side affine fit decides (:func:`classic_of`), and the lock
across steps of which classic estimator the data follow (:class:`ConventionTracker`). The
device-side arithmetic they share (the stabilizer residuals of each) is the pure tensor
function :mod:`grpo_monitor.stats.scale_fit`, which also holds their names, in order.
Used by :mod:`grpo_monitor.estimators.judge`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Protocol

from ..stats.scale_fit import CONVENTIONS
from . import families
from .base import Estimator


class Declared(Protocol):
    """What the classic fit reads of a :class:`~grpo_monitor.MonitorConfig` (not imported: the config
    validates estimator names through this package, so this package does not import the config)."""

    estimator: str
    stabilizer: float | None
    tolerances: Any  # reads stabilizer_spread and max_stabilizer_ratio


_PINNED = ("none", "leave_one_out")  # conventions with no free stabilizer


_AFFINE_STABILIZERS = ("add", "add_if_positive")


def classic_of(est: Estimator) -> tuple[str, float | None] | None:
    """The device-checkable convention and fixed stabilizer of ``est``, or None (replay it).

    >>> from grpo_monitor.estimators import get
    >>> classic_of(get("trl.group")), classic_of(get("verl.rloo")), classic_of(get("nemo_rl.grpo"))
    (('bessel', 0.0001), ('leave_one_out', None), None)
    """
    if est.name in CONVENTIONS:
        return est.name, None
    ref = est.reference
    if not isinstance(ref, functools.partial):
        return None
    if ref.func is families.leave_one_out:
        return "leave_one_out", None
    if ref.func is not families.centered:
        return None
    scale = ref.keywords.get("scale", "none")
    if scale == "none":
        return "none", None
    if scale == "batch":
        return "batch", None
    if est.params.get("stabilizer", "add") not in _AFFINE_STABILIZERS:
        return None
    return ("population" if est.params.get("ddof", 0) == 0 else "bessel"), float(est.params.get("eps", 0.0))


def reported_epsilon(name: str | None, stabilizer: float | None, rollout: dict[str, float] | None) -> float | None:
    """``grpo/adv/stabilizer`` as the catalogue states it: epsilon in 1/k = base + epsilon, constant in a healthy run.

    The device fit's stabilizer of a batch-scaled convention is the whole 1/k (the batch std + epsilon): the
    batch std (``ddof`` of the estimator) is taken off; conventions with no free stabilizer (``none``,
    ``leave_one_out``) report exactly 0 (their fitted value is rounding noise around 0).

    >>> reported_epsilon("trl.none", 4e-9, None), reported_epsilon("population", 1e-6, None)
    (0.0, 1e-06)
    >>> round(reported_epsilon("batch", 0.5 + 1e-4, {"scorable_rows": 4.0, "reward_sum": 2.0, "reward_sq_sum": 2.0}), 9)
    0.0001
    """
    from .registry import ESTIMATORS, get

    if stabilizer is None or name is None or name not in ESTIMATORS:
        return stabilizer
    est = get(name)
    classic = classic_of(est)
    if classic is None or classic[0] not in (*_PINNED, "batch"):
        return stabilizer
    if classic[0] in _PINNED:
        return 0.0
    if not rollout:
        return None
    n, ddof = rollout.get("scorable_rows", 0.0), float(est.params.get("ddof", 0))
    if n - ddof <= 0:
        return None
    total = rollout["reward_sum"]
    var = max(rollout["reward_sq_sum"] - total * total / n, 0.0) / (n - ddof)
    return stabilizer - var ** 0.5


@dataclasses.dataclass
class ConventionFit:
    """The outcome of one step: the conventions that fit, the one reported, the stabilizer."""

    fitting: tuple[str, ...]
    name: str | None
    stabilizer: float | None
    problem: str | None = None  # why this step breaches the convention invariant


def fitting_conventions(values: dict[str, float], config: Declared) -> tuple[tuple[str, ...], dict[str, float]]:
    """Conventions whose stabilizer residuals agree across live groups, and each one's stabilizer.

    ``values`` are the reduced rollout fields (``e_<name>_min/max``, ``inv_k_sum``,
    ``live``, ``live_std_sum``). A convention fits when its stabilizer e_g is the same in
    every live group (within ``tolerances.stabilizer_spread`` of the typical 1/k); ``none`` and
    ``leave_one_out`` also need e = 0, population and Bessel e >= 0 (or the declared
    ``config.stabilizer``). When the live groups' reward stds are too alike to tell
    population from Bessel (both fit), the one with a plausible stabilizer (at most
    ``tolerances.max_stabilizer_ratio`` of the mean std) is kept.
    """
    live = values["live"]
    tol = config.tolerances.stabilizer_spread * abs(values["inv_k_sum"] / live)
    std_mean = values["live_std_sum"] / live
    stabs = {}
    for name in CONVENTIONS:
        lo, hi = values[f"e_{name}_min"], values[f"e_{name}_max"]
        if hi - lo <= tol:
            stabs[name] = (lo + hi) / 2
    ambiguous = "population" in stabs and "bessel" in stabs
    fits = []
    for name, stab in stabs.items():
        if name in _PINNED and abs(stab) > tol:
            continue
        if name in ("population", "bessel") and not _plausible_stabilizer(stab, tol, std_mean, ambiguous, config):
            continue
        fits.append(name)
    return tuple(fits), {name: stabs[name] for name in fits}


def _plausible_stabilizer(stab: float, tol: float, std_mean: float, ambiguous: bool, config: Declared) -> bool:
    if config.stabilizer is not None:
        return abs(stab - config.stabilizer) <= tol
    if stab < -tol:
        return False
    return not ambiguous or stab <= config.tolerances.max_stabilizer_ratio * std_mean + tol


class ConventionTracker:
    """Locks the set of conventions consistent with every step so far.

    With a declared convention the data must fit it. With ``"auto"`` the candidates are
    the intersection over steps; an empty fit or an empty intersection is a breach, after
    which the tracker re-locks on the current step's candidates.
    """

    def __init__(self, config: Declared):
        self.config = config
        self.candidates: tuple[str, ...] | None = None

    def update(self, values: dict[str, float]) -> ConventionFit | None:
        """Fit this step's reduced rollout ``values``; None when no live group carries advantages."""
        if values.get("live", 0) < 1 or values.get("adv_rows", 0) < 1:
            return None
        fits, stabs = fitting_conventions(values, self.config)
        declared = self.config.estimator
        if declared != "auto":
            name = declared if declared in fits else None
            problem = None if name else _mismatch(declared, fits)
            return ConventionFit(fits, name or declared, stabs.get(declared), problem)
        if not fits:
            return ConventionFit((), None, None,
                                 "no convention fits: the scale k_g varies across groups in no known way")
        kept = tuple(c for c in (self.candidates or fits) if c in fits)
        problem = None
        if not kept:
            problem = f"the convention changed between steps: was {self._name()}, now fits {list(fits)}"
            kept = fits
        self.candidates = kept
        return ConventionFit(fits, kept[0], stabs[kept[0]], problem)

    def _name(self) -> str | None:
        return self.candidates[0] if self.candidates else None

    def state_dict(self) -> dict:
        """The locked candidates (plain Python)."""
        return {"candidates": list(self.candidates) if self.candidates is not None else None}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""
        cands = state.get("candidates")
        self.candidates = tuple(cands) if cands is not None else None


def _mismatch(declared: str, fits: tuple[str, ...]) -> str:
    seen = f"the data fit {list(fits)}" if fits else "the data fit no known convention"
    return f"declared std_convention={declared!r} but {seen}"
