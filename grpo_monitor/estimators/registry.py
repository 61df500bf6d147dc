"""``ESTIMATORS``: every named estimator, one record each; lookups and the generated table."""

from __future__ import annotations

import difflib

from .base import Estimator
from .frameworks import ALL

#: Every estimator by its dotted name ("population", "trl.group", "verl.grpo", ...).
ESTIMATORS: dict[str, Estimator] = {est.name: est for est in ALL}


class UnknownEstimatorError(ValueError):
    """An estimator name the registry does not hold; the message is one line naming the closest names."""


def closest(name: str, names: list[str] | None = None, n: int = 3) -> list[str]:
    """The registry names closest to ``name`` (difflib; a case-only difference first).

    >>> closest("besel"), closest("Verl.GRPO")
    (['bessel'], ['verl.grpo'])
    """
    pool = list(ESTIMATORS) + ["auto"] if names is None else names
    folded = [p for p in pool if p.lower() == name.lower()]
    return folded or difflib.get_close_matches(name, pool, n=n, cutoff=0.6)


def unknown_estimator(name: object, argument: str | None = None) -> UnknownEstimatorError:
    """The one-line error for an unknown estimator name given as ``argument``.

    >>> str(unknown_estimator("besel", "--estimator"))
    "--estimator: unknown estimator 'besel'; did you mean 'bessel'? (names: 'auto' or grpo_monitor.ESTIMATORS)"
    """
    near = closest(name) if isinstance(name, str) else []
    hint = f"did you mean {' or '.join(map(repr, near))}?" if near else \
        "expected 'auto' or a registry name such as 'population', 'bessel', 'trl.group', 'verl.grpo'"
    where = f"{argument}: " if argument else ""
    return UnknownEstimatorError(f"{where}unknown estimator {name!r}; {hint} (names: 'auto' or "
                                 "grpo_monitor.ESTIMATORS)")


def get(name: str) -> Estimator:
    """The estimator called ``name``, or an :class:`UnknownEstimatorError` naming the closest ones.

    >>> get("verl.grpo").params["eps"]
    1e-06
    """
    try:
        return ESTIMATORS[name]
    except KeyError:
        raise unknown_estimator(name) from None


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
