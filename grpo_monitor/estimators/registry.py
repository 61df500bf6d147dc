"""``ESTIMATORS``: every named estimator, one record each; lookups and the generated table."""

from __future__ import annotations

from .base import Estimator
from .frameworks import ALL

#: Every estimator by its dotted name ("population", "trl.group", "verl.grpo", ...).
ESTIMATORS: dict[str, Estimator] = {est.name: est for est in ALL}


def get(name: str) -> Estimator:
    """The estimator called ``name``, or a ValueError listing the known names.

    >>> get("verl.grpo").params["eps"]
    1e-06
    """
    try:
        return ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"unknown estimator {name!r}; expected one of {sorted(ESTIMATORS)}") from None


def by_framework() -> dict[str, tuple[Estimator, ...]]:
    """Estimators grouped by framework ("generic" for the undotted conventions), in registry order."""
    out: dict[str, list[Estimator]] = {}
    for est in ESTIMATORS.values():
        out.setdefault(est.framework, []).append(est)
    return {k: tuple(v) for k, v in out.items()}


def table() -> list[dict[str, str]]:
    """One row per estimator (name, formula, params, promises, singleton, source), for README tables."""
    return [
        {
            "name": est.name,
            "formula": est.description,
            "params": ", ".join(f"{k}={v!r}" for k, v in est.params.items()) or "-",
            "promises": ", ".join(sorted(est.promises)),
            "singleton": est.singleton,
            "source": est.source,
        }
        for est in ESTIMATORS.values()
    ]
