"""Advantage estimators as data: float64 references, free parameters, promises and sources.

``ESTIMATORS`` maps a dotted name ("bessel", "trl.group", "verl.grpo", "nemo_rl.grpo", ...)
to an :class:`Estimator`; :func:`fit` and :func:`candidates` replay observed advantages
against them ("which estimator, with which stabilizer, explains these numbers").

>>> import numpy as np
>>> ESTIMATORS["bessel"](np.array([1.0, 0.0, 1.0, 0.0]), np.zeros(4, dtype=int)).round(3).tolist()
[0.866, -0.866, 0.866, -0.866]
"""

from .base import PROMISES, SINGLETONS, Estimator
from .families import STABILIZERS
from .registry import ESTIMATORS, by_framework, get, table
from .replay import Fit, candidates, fit, fit_all

__all__ = [
    "ESTIMATORS",
    "PROMISES",
    "SINGLETONS",
    "STABILIZERS",
    "Estimator",
    "Fit",
    "by_framework",
    "candidates",
    "fit",
    "fit_all",
    "get",
    "table",
]
