"""Known defect shapes: advantage functions that shipped broken, held like registry entries, fitted like them,
and named as errors when they fit.

A defect shape is finite and monotone in reward inside each group, so the universal invariants alone would call it
an ``unknown_estimator`` (a warning) under ``estimator="auto"``. Each :class:`KnownDefect` holds its float64
reference (an :class:`~grpo_monitor.estimators.Estimator`, fitted by the same replay), what is wrong, where it
shipped (file and issue) and what fixed it. :func:`matching_defect` runs only when no registry entry fits, so a
shipped estimator's advantages never reach it.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import numpy as np

from . import families as f
from .base import Estimator
from .replay import fit as replay_fit


@dataclasses.dataclass(frozen=True)
class KnownDefect:
    """One defect shape: its reference, what is wrong, the source it shipped in, and its fix."""

    shape: Estimator
    defect: str
    fixed_by: str

    @property
    def name(self) -> str:
        return self.shape.name

    def hint(self) -> str:
        """The breach's likely cause: this defect, and the fix to take."""
        return f"the known defect {self.name} in the advantage code; take its fix: {self.fixed_by}"

    def text(self) -> str:
        """The breach text: the defect by name, what is wrong, its source and fix."""
        return (f"the advantages match the known defect {self.name}: {self.defect} ({self.shape.source}); "
                f"fixed by {self.fixed_by}")


_VERL_3635 = KnownDefect(
    Estimator("defect.verl.variance_floor", partial(f.centered, scale="group", singleton="raw"),
              {"ddof": 1, "eps": 1e-6, "stabilizer": "clamp_var"}, frozenset(),
              "verl/utils/groupwise.py::group_mean_std (std = sqrt(max(var, eps)), var one-pass float32 "
              "(sum2 - sum^2/n)/(n-1), eps=1e-6) as compute_grpo_vectorized_outcome_advantage called it; "
              "verl issue #3635", "(r - mean_g) / sqrt(max(var_g, 1e-6)), Bessel: the variance floored at eps "
              "instead of eps added to the std", fit_param=None, eps_power=None, singleton="raw"),
    "the variance is floored at eps (clamp(var, eps)) instead of a stabilizer added to the std, so every group "
    "whose reward std is below sqrt(eps) = 1e-3 is divided by 1e-3, not by its std: low-variance groups' "
    "advantages are flattened towards 0, and the one-pass float32 variance can cancel to a wrong value",
    "verl PR #6348 (group_mean_std with a two-pass variance, called with eps=0 and epsilon added to the std: "
    "the registry's verl.grpo_vectorized)")

#: Every known defect shape by name.
DEFECTS: dict[str, KnownDefect] = {d.name: d for d in (_VERL_3635,)}


def matching_defect(rewards: np.ndarray, gid: np.ndarray, advantages: np.ndarray, lengths: np.ndarray | None,
                    tol: float) -> KnownDefect | None:
    """The first known defect whose reference reproduces ``advantages`` within ``tol`` x typical |advantage|."""
    for defect in DEFECTS.values():
        if replay_fit(defect.shape, rewards, gid, advantages, lengths=lengths, free=False).fits(tol):
            return defect
    return None
