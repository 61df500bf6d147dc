"""A step's report from host values only: pure functions, no state, no I/O.

``assemble_report`` turns what one step synced (:class:`~grpo_monitor.sync.SyncedStep`),
the step's findings and what the run state derived (:class:`~grpo_monitor.run_state.RunUpdate`)
into the :class:`StepReport` every sink receives, a breach's report included.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .accumulator import HostGroups
from .derive import convention_metrics, degenerate_split, ledger_metrics, rollout_metrics
from .report import StepReport


def assemble_report(step: int, rollout: dict[str, float] | None, ledger: dict[str, float] | None,
                    tokens: dict[str, float] | None, groups: HostGroups | None, convention: Any,
                    violations: Sequence[Any], run: Any, failed: bool) -> StepReport:
    """Metrics, histograms, tables and violations of the step.

    ``rollout`` is the whole step's rollout statistics, ``convention`` the step's fit (or
    None), ``run`` the :class:`~grpo_monitor.run_state.RunUpdate` of this step (or None).
    """
    metrics: dict[str, float] = {}
    if rollout and rollout["groups"] > 0:
        metrics.update(rollout_metrics(rollout))
        if groups is not None:
            metrics.update(degenerate_split(rollout, groups.kept))
    if convention is not None:
        metrics.update(convention_metrics(convention.name, convention.stabilizer))
    if ledger and ledger.get("generation_batches", 0) > 0:
        metrics.update(ledger_metrics(ledger, rollout["groups"] if rollout else 0.0))
    if tokens is not None:
        from .stats.tokens import token_metrics

        metrics.update(token_metrics(list(tokens.values())))  # the dict keeps TOKEN_FIELDS order
    report = StepReport(step, metrics, list(violations), failed=failed)
    report.convention = convention.name if convention is not None else None
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
