"""Assemble a :class:`StepReport` from the synced step state (host values only)."""

from __future__ import annotations

import numpy as np

from .metrics import convention_metrics, ledger_metrics, rollout_metrics
from .questions import QuestionTracker
from .report import StepReport
from .step import LEDGER, ROLLOUT, StepState


def build_report(step: int, st: StepState, questions: QuestionTracker, failed: bool) -> StepReport:
    """Metrics, histograms, tables and violations of the step."""
    metrics: dict[str, float] = {}
    roll = ROLLOUT.to_dict(st.rollout_synced.tolist()) if st.rollout_synced is not None else None
    if roll and roll["groups"] > 0:
        metrics.update(rollout_metrics(roll))
    if st.convention is not None:
        metrics.update(convention_metrics(st.convention.name, st.convention.stabilizer))
    ledger = LEDGER.to_dict(st.synced_ledger.tolist()) if st.synced_ledger is not None else {}
    if ledger.get("generation_batches", 0) > 0:
        metrics.update(ledger_metrics(ledger, roll["groups"] if roll else 0.0))
    if st.synced_tokens is not None:
        from .stats.tokens import token_metrics

        metrics.update(token_metrics(st.synced_tokens))
    report = StepReport(step, metrics, list(st.violations), failed=failed)
    report.convention = st.convention.name if st.convention is not None else None
    _per_group(report, st, questions, roll, ledger)
    metrics.update(violation_metrics(st.violations))
    return report


def _per_group(report: StepReport, st: StepState, questions: QuestionTracker, roll: dict | None, ledger: dict) -> None:
    groups = st.synced_groups
    if groups is None or not (groups.kept or groups.generated or len(groups.adv)):
        return
    kept, generated = groups.kept, groups.generated
    if kept:
        std = np.concatenate([k.std[k.n > 0] for k in kept])
        report.histograms["grpo/reward/question_std"] = std.tolist()
    adv = groups.adv
    if np.isfinite(adv).any():
        report.histograms["grpo/adv/values"] = adv[np.isfinite(adv)].tolist()
    binary = (roll or {}).get("nonbinary", 0) == 0 and ledger.get("generated_nonbinary", 0) == 0
    report.metrics.update(questions.update(report.step, kept, generated, binary))
    report.flagged_questions = questions.flagged()
    if report.step % questions.config.table_every == 0 and len(questions.history):
        report.tables["grpo/questions"] = questions.table(questions.config.table_rows)


def violation_metrics(violations: list) -> dict[str, float]:
    """``grpo/invariants/violations`` and one count per broken invariant."""
    out = {"grpo/invariants/violations": float(len(violations))}
    for v in violations:
        key = f"grpo/invariants/{v.invariant}"
        out[key] = out.get(key, 0.0) + 1.0
    return out
