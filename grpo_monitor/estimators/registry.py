"""``ESTIMATORS``: every named estimator, one record each, with its stable id; lookups and the generated table."""

from __future__ import annotations

import dataclasses
import difflib

from ..errors import UnknownEstimatorError as UnknownEstimatorError  # its home; this old path keeps working
from .base import CUSTOM, CUSTOM_ID, UNKNOWN_ID, Estimator
from .frameworks import ALL

#: The stable integer id of every registry entry, logged as ``grpo/adv/estimator_id`` (and under
#: its 0.1 key ``grpo/adv/convention_id``). An id is never changed or reused (dashboards' histories
#: depend on it): a new entry takes the next free number. The classic five keep 0-4.
ESTIMATOR_IDS: dict[str, int] = {
    "population": 0, "bessel": 1, "none": 2, "leave_one_out": 3, "batch": 4,
    "trl.group": 5, "trl.batch": 6, "trl.none": 7, "trl.normalize_then_sum": 8,
    "verl.grpo": 9, "verl.grpo_vectorized": 10, "verl.grpo_no_std": 11, "verl.rloo": 12, "verl.rloo_vectorized": 13,
    "verl.reinforce_plus_plus_baseline": 14, "verl.gpg": 15, "verl.grpo_passk": 16, "verl.grpo_passk_no_std": 17,
    "nemo_rl.grpo": 18, "nemo_rl.grpo_no_loo": 19,
    "openrlhf.group_norm": 20, "openrlhf.rloo": 21, "openrlhf.reinforce_baseline": 22, "openrlhf.dr_grpo": 23,
    "areal.grpo": 24, "areal.dr_grpo": 25, "roll.reward_norm": 26, "roll.grpo": 27, "skyrl.grpo": 28,
    "skyrl.maxrl": 29, "open_instruct.standard": 30, "open_instruct.centered": 31,
    "verl.opo": 32, "length_weighted_loo": 33, "roll.grpo_clip": 34, "none_clip_negative": 35,
    "roll.batch_mean": 36, "roll.batch_norm": 37, "verl.gdpo": 38,
    "skyrl.reinforce_plus_plus": 39, "verl.reinforce_plus_plus": 40, "skyrl.rloo": 41,
}


def _with_ids(entries: tuple[Estimator, ...]) -> dict[str, Estimator]:
    missing = [e.name for e in entries if e.name not in ESTIMATOR_IDS]
    if missing:
        raise RuntimeError(f"registry entries {missing} have no id in ESTIMATOR_IDS; give each the next free number")
    if len(set(ESTIMATOR_IDS.values())) != len(ESTIMATOR_IDS):
        raise RuntimeError("ESTIMATOR_IDS holds a duplicate id; ids are never reused")
    return {e.name: dataclasses.replace(e, id=ESTIMATOR_IDS[e.name]) for e in entries}


#: Every estimator by its dotted name ("population", "trl.group", "verl.grpo", ...).
ESTIMATORS: dict[str, Estimator] = _with_ids(ALL)
_BY_ID = {est.id: name for name, est in ESTIMATORS.items()}


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
        "expected 'auto' or a registry name such as 'population', 'bessel', 'trl.group', 'verl.grpo', or your " \
        "own function declared with grpo_monitor.estimators.custom(fn, name=...)"
    where = f"{argument}: " if argument else ""
    return UnknownEstimatorError(f"{where}unknown estimator {name!r}; {hint} (names: 'auto' or "
                                 "grpo_monitor.ESTIMATORS)")


def get(name: str) -> Estimator:
    """The estimator called ``name`` (a registry entry or a user's own, see ``custom``), or a ValueError.

    >>> get("verl.grpo").params["eps"], get("verl.grpo").id
    (1e-06, 9)
    """
    try:
        return ESTIMATORS[name] if name in ESTIMATORS else CUSTOM[name]
    except KeyError:
        raise unknown_estimator(name) from None


def known(name: str) -> bool:
    """Whether ``name`` is a registry entry or a declared custom estimator."""
    return name in ESTIMATORS or name in CUSTOM


def id_of(name: str | None) -> int:
    """The stable id of ``name``: its registry id, ``CUSTOM_ID`` for a user's own, ``UNKNOWN_ID`` otherwise.

    >>> id_of("nemo_rl.grpo"), id_of(None)
    (18, -1)
    """
    if name in ESTIMATORS:
        return ESTIMATORS[name].id  # type: ignore[return-value]
    return CUSTOM_ID if name is not None and known(name) else UNKNOWN_ID


def name_of(estimator_id: float) -> str | None:
    """The registry entry with this id (None for a custom, unknown or retired id)."""
    return _BY_ID.get(int(estimator_id)) if estimator_id == estimator_id else None


def by_framework() -> dict[str, tuple[Estimator, ...]]:
    """Estimators grouped by framework ("generic" for the undotted conventions), in registry order."""
    out: dict[str, list[Estimator]] = {}
    for est in ESTIMATORS.values():
        out.setdefault(est.framework, []).append(est)
    return {k: tuple(v) for k, v in out.items()}


def table() -> list[dict[str, str]]:
    """One row per estimator (id, name, formula, params, promises, singleton, source), for README tables."""
    return [
        {
            "id": str(est.id),
            "name": est.name,
            "formula": est.description,
            "params": ", ".join(f"{k}={v!r}" for k, v in est.params.items()) or "-",
            "promises": ", ".join(sorted(est.promises)),
            "singleton": est.singleton,
            "source": est.source,
        }
        for est in ESTIMATORS.values()
    ]
