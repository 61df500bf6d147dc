"""Advantage estimators as data: float64 references, free parameters, promises and sources.

``ESTIMATORS`` maps a dotted name ("bessel", "trl.group", "verl.grpo", "nemo_rl.grpo", ...)
to an :class:`Estimator`; :func:`fit` and :func:`candidates` replay observed advantages
against them ("which estimator, with which stabilizer, explains these numbers").

>>> import numpy as np
>>> ESTIMATORS["bessel"](np.array([1.0, 0.0, 1.0, 0.0]), np.zeros(4, dtype=int)).round(3).tolist()
[0.866, -0.866, 0.866, -0.866]
"""

from .base import PROMISES, SINGLETONS, Estimator
from .custom import CUSTOM, custom
from .families import STABILIZERS
from .registry import CUSTOM_ID, ESTIMATOR_IDS, ESTIMATORS, UNKNOWN_ID, by_framework, get, id_of, known, name_of, table
from .replay import Fit, candidates, fit, fit_all

__all__ = [
    "CUSTOM",
    "CUSTOM_ID",
    "ESTIMATORS",
    "ESTIMATOR_IDS",
    "UNKNOWN_ID",
    "custom",
    "id_of",
    "known",
    "name_of",
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
