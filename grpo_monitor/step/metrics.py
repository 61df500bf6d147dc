"""From a synced step's host values to its report: the ``grpo/...`` metric values and the StepReport.

Pure functions, no state, no I/O. A reader finds how each metric's value is derived here by
its key (a family's keys in its own module, :data:`grpo_monitor.catalog.families.FAMILIES`,
read out here with :func:`~grpo_monitor.catalog.family.read_out`); what the key means, its
section and its aggregation are catalogued in :mod:`grpo_monitor.catalog.metrics`.
``assemble_report`` turns what one step synced (:class:`~grpo_monitor.step.sync.SyncedStep`),
the step's findings and what the run state derived (:class:`~grpo_monitor.run.state.RunUpdate`)
into the :class:`StepReport` every sink receives, a breach's report included.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..catalog.families import IN_ORDER, read_histograms, read_out
from ..report import StepReport
from .accumulator import HostGroups


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else math.nan


def rollout_metrics(v: dict[str, float]) -> dict[str, float]:
    """Group and advantage metrics of the step's retained (training) rollout."""
    groups = v["groups"]
    out = {
        "grpo/groups/total": groups,
        # groups whose scorable rewards are all identical: no gradient from the reward term
        "grpo/groups/degenerate_rate": _ratio(v["degenerate"], groups),
        # groups with reward variation: the prompts the update is really made of
        "grpo/groups/effective_prompts": v["live"],
        "grpo/reward/mean": _ratio(v["reward_sum"], v["scorable_rows"]),
        # mean over groups of the population std of their rewards
        "grpo/reward/question_std_mean": _ratio(v["question_std_sum"], v["scored_groups"]),
        "grpo/rows/unscorable": v["rows"] - v["scorable_rows"],
    }
    if v["adv_rows"] > 0:
        out.update(_advantage_metrics(v))
    out.update(read_out(IN_ORDER, "rollout", v))  # the families' keys of the rollout vector (truncation, ages)
    return out


#: ``degenerate_kinds`` codes: a live group, a degenerate one at the batch's lowest reward (unsolved), at its
#: highest (solved), anywhere else (or with no scorable row).
LIVE, DEGENERATE_LOW, DEGENERATE_HIGH, DEGENERATE_OTHER = 0, 1, 2, 3


def degenerate_kinds(degenerate: np.ndarray, reward_sum: np.ndarray, n: np.ndarray, lo: float,
                     hi: float) -> np.ndarray:
    """Per group, which kind of degenerate group it is (the codes above) given the batch's reward range
    ``[lo, hi]``: its value (reward sum over scorable rows) equal to ``lo``, to ``hi`` or neither. A batch
    holding a single value counts as low when it is <= 0, high when > 0.

    >>> degenerate_kinds(np.array([True, True, False, True]), np.array([0.0, 4.0, 2.0, 1.0]),
    ...                  np.array([4.0, 4.0, 4.0, 2.0]), 0.0, 1.0).tolist()
    [1, 2, 0, 3]
    """
    scored = degenerate & (n > 0)
    value = reward_sum / np.maximum(n, 1)
    at_lo, at_hi = _close(value, lo), _close(value, hi)
    if lo == hi:
        at_lo, at_hi = at_lo & (value <= 0), at_hi & (value > 0)
    kinds = np.where(degenerate, DEGENERATE_OTHER, LIVE)
    kinds = np.where(scored & at_hi, DEGENERATE_HIGH, kinds)
    return np.where(scored & at_lo, DEGENERATE_LOW, kinds).astype(np.int8)


def _close(values: np.ndarray, target: float) -> np.ndarray:
    """``np.isclose(values, target, rtol=1e-9, atol=0)`` for a scalar target, in two operations (isclose's own checks
    cost ~20 us a call): within 1e-9 of a finite target, equal to an infinite one, never NaN."""
    if math.isfinite(target):
        return np.abs(values - target) <= 1e-9 * abs(target)
    return values == target


def degenerate_split(v: dict[str, float], kept: Sequence[Any]) -> dict[str, float]:
    """The degenerate rate split by the value its groups sit at, as shares of all groups (low + high + other
    = degenerate_rate): the batch's lowest reward (unsolved), its highest (solved), anything else.

    ``kept`` are the step's retained per-group host arrays (every rank's); a degenerate group's value is its
    reward sum over its scorable count. A batch holding a single reward value counts as low when <= 0,
    high when > 0.
    """
    groups, lo, hi = v["groups"], v["reward_min"], v["reward_max"]
    if not groups > 0 or not kept:
        return {}
    kinds = np.concatenate([degenerate_kinds(k.degenerate, k.reward_sum, k.n, lo, hi) for k in kept])
    low, high = float((kinds == DEGENERATE_LOW).sum()), float((kinds == DEGENERATE_HIGH).sum())
    return {"grpo/groups/degenerate_low_rate": low / groups, "grpo/groups/degenerate_high_rate": high / groups,
            "grpo/groups/degenerate_other_rate": (v["degenerate"] - low - high) / groups}


def _advantage_metrics(v: dict[str, float]) -> dict[str, float]:
    mean = v["adv_sum"] / v["adv_rows"]
    live = v["live"]
    return {
        "grpo/adv/mean": mean,
        "grpo/adv/std": math.sqrt(max(v["adv_sq_sum"] / v["adv_rows"] - mean * mean, 0.0)),
        # largest |mean advantage| of a group with variation: 0 when centred per group
        "grpo/adv/group_mean_abs_max": _finite_or_zero(v["adv_group_mean_abs_max"]),
        # mean over live groups of the population std of their advantages:
        # 1 for population z-scores, sqrt((G-1)/G) for Bessel
        "grpo/adv/live_std_mean": _ratio(v["live_adv_std_sum"], live),
        # largest |advantage| in a group without variation: 0 unless a stabilizer misbehaves
        "grpo/adv/degenerate_abs_max": _finite_or_zero(v["degenerate_abs_max"]),
        # mean of k_g * std_g over live groups: the advantage scale in units of the reward std
        "grpo/adv/convention_scale": _ratio(v["live_scale_sum"], live),
    }


def _finite_or_zero(x: float) -> float:
    return x if math.isfinite(x) else 0.0


def estimator_metrics(name: str | None, stabilizer: float | None) -> dict[str, float]:
    """The estimator in use as numbers: its stable id (``ESTIMATOR_IDS``; -2 a user-declared one, -1 none).

    >>> estimator_metrics("verl.grpo", 1e-6)
    {'grpo/adv/estimator_id': 9.0, 'grpo/adv/convention_id': 9.0, 'grpo/adv/stabilizer': 1e-06}

    ``grpo/adv/convention_id`` is the id's 0.1 key (the catalog's alias), kept for the dashboards built on it.
    """
    from ..estimators.registry import id_of

    number = float(id_of(name))
    out = {"grpo/adv/estimator_id": number, "grpo/adv/convention_id": number}
    if stabilizer is not None:
        out["grpo/adv/stabilizer"] = stabilizer
    return out


def ledger_metrics(v: dict[str, float], retained_groups: float) -> dict[str, float]:
    """Dynamic-sampling (retry) ledger: exact counts of what was generated to fill the batch."""
    gen = v["generated_groups"]
    out = {
        "grpo/sampling/generation_batches": v["generation_batches"],
        "grpo/sampling/generated_groups": gen,
        "grpo/sampling/generated_responses": v["generated_responses"],
        "grpo/sampling/retained_groups": retained_groups,
        "grpo/sampling/discarded_groups": gen - retained_groups,
        "grpo/sampling/retention_rate": _ratio(retained_groups, gen),
        # generated responses / retained groups, failed retries included
        "grpo/sampling/responses_per_retained_group": _ratio(v["generated_responses"], retained_groups),
        "grpo/sampling/generated_degenerate_rate": _ratio(v["generated_degenerate"], gen),
    }
    if v["token_batches"] > 0:
        out["grpo/sampling/generated_tokens"] = v["generated_tokens"]
        out["grpo/sampling/tokens_per_retained_group"] = _ratio(v["generated_tokens"], retained_groups)
    out.update(read_out(IN_ORDER, "ledger", v))  # the families' keys of the ledger (the staleness drop)
    return out


def assemble_report(step: int, rollout: dict[str, float] | None, ledger: dict[str, float] | None,
                    tokens: dict[str, float] | None, groups: HostGroups | None, estimator: Any,
                    violations: Sequence[Any], run: Any, failed: bool, mismatch_mask: str | None = None) -> StepReport:
    """Metrics, histograms, tables and violations of the step.

    ``rollout`` is the whole step's rollout statistics, ``estimator`` the step's judgement (or
    None), ``run`` the :class:`~grpo_monitor.run.state.RunUpdate` of this step (or None).
    """
    metrics: dict[str, float] = {}
    if rollout and rollout["groups"] > 0:
        metrics.update(rollout_metrics(rollout))
        if groups is not None:
            metrics.update(degenerate_split(rollout, groups.kept))
    if estimator is not None:
        from ..estimators.classic import reported_epsilon

        metrics.update(estimator_metrics(estimator.name, reported_epsilon(estimator.name, estimator.stabilizer,
                                                                          rollout)))
    if ledger and ledger.get("generation_batches", 0) > 0:
        metrics.update(ledger_metrics(ledger, rollout["groups"] if rollout else 0.0))
    moe: dict[str, list[float]] = {}
    if tokens is not None:
        from ..stats.tokens import TOKEN_FIELDS, token_metrics

        values = list(tokens.values())[:len(TOKEN_FIELDS)]  # the dict keeps TOKEN_FIELDS order, routing after
        metrics.update(token_metrics(values, mismatch_mask))
        metrics.update(read_out(IN_ORDER, "routing", tokens))  # the families' keys of the routing counts (MoE)
        moe = read_histograms(IN_ORDER, "routing", tokens)
    report = StepReport(step, metrics, list(violations), failed=failed, histograms=moe)
    report.estimator = estimator.name if estimator is not None else None
    report.histograms.update(group_histograms(groups))
    if run is not None:
        metrics.update(run.metrics)
        report.flagged_questions = list(run.flagged)
        if run.table is not None:
            report.tables["grpo/questions"] = run.table
    metrics.update(violation_metrics(violations))
    return report


def group_histograms(groups: HostGroups | None) -> dict[str, list[float]]:
    """The per-question reward std of the retained groups and a sample of the advantages."""
    out: dict[str, list[float]] = {}
    if groups is None:
        return out
    if groups.kept:
        out["grpo/reward/question_std"] = np.concatenate([k.std[k.n > 0] for k in groups.kept]).tolist()
    adv = groups.adv
    if len(adv) and np.isfinite(adv).any():
        out["grpo/adv/values"] = adv[np.isfinite(adv)].tolist()
    return out


def violation_metrics(violations: Sequence[Any]) -> dict[str, float]:
    """``grpo/invariants/violations`` and one count per broken invariant."""
    out = {"grpo/invariants/violations": float(len(violations))}
    for v in violations:
        key = f"grpo/invariants/{v.invariant}"
        out[key] = out.get(key, 0.0) + 1.0
    return out
