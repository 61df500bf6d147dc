"""Checks: from what a step synced to :class:`Violation` records. Pure functions, host side.

:func:`check_rollout` judges a synced rollout's estimator against the run's lock and returns
the violations, the judgement and the narrowed lock as data (:class:`RolloutCheck`); the
monitor applies them. :func:`rollout_findings` decides what counts: the estimator's promises
filter the device-side breaches, the promised replay checks run on the host rows, and a ``convention``
finding is added only when no structural breach already explains the misfit (the root-cause rule).

The per-step path only moves counts; the observed values and the first offending group
ids are read from the rollout's per-group tensors when a count is nonzero (the breach
path). Each invariant's record, mask and decision live in :mod:`grpo_monitor.invariants`
(``group_violations``, ``residue_bound``, ``worst_rows`` and ``violation`` keep their old path here);
this module puts a step's rollout and token findings together.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from ..config import MonitorConfig
from ..estimators.judge import EstimatorJudge, Judgement, ignores_groups
from ..estimators.rows import host_rows
from ..invariants import DEVICE_PROMISES, ROOT_CAUSES, tokens
from ..invariants.estimator import replay_violations
from ..invariants.record import Violation, violation
from ..invariants.rollout import group_violations as group_violations
from ..invariants.rollout import residue_bound as residue_bound
from ..invariants.tokens import worst_rows as worst_rows


@dataclasses.dataclass(frozen=True)
class RolloutCheck:
    """What checking one synced rollout slice found: its violations, the estimator judgement (None: no
    live group carries advantages) and the run's estimator lock after it (the one given is unchanged)."""

    found: list[Violation]
    judged: Judgement | None
    lock: EstimatorJudge


def check_rollout(rollout: dict[str, float], records: Sequence, lock: EstimatorJudge, config: MonitorConfig,
                  step: int) -> RolloutCheck:
    """Judge the rollout's estimator under the run's ``lock`` and decide what counts (:func:`rollout_findings`)."""
    judged, after = lock.judged(rollout, records, breached_promises(rollout))
    return RolloutCheck(rollout_findings(rollout, records, judged, config, step), judged, after)


def breached_promises(rollout: dict[str, float]) -> frozenset[str]:
    """The device-side promises the rollout's counts show broken (what the estimator judge weighs)."""
    return frozenset(name for name in DEVICE_PROMISES if rollout.get(f"viol_{name}", 0) > 0)


def rollout_findings(rollout: dict[str, float], records: Sequence, judged: Judgement | None,
                     config: MonitorConfig, step: int) -> list[Violation]:
    """The violations of a synced rollout under the estimator ``judged`` (None: nothing named, all count).

    ``records`` are the step's rollout records (per-group detail, labels, question ids, the
    inputs). Only what the estimator promises counts; a misfit no root cause explains is a
    ``convention`` error.
    """
    stabilizer = config.stabilizer if config.stabilizer is not None else getattr(judged, "stabilizer", None)
    labelled = [(r.detail, r.questions if r.questions is not None else r.labels) for r in records]
    found = group_violations(rollout, labelled, config, step, stabilizer)
    if judged is None:
        return found
    found = [v for v in found if v.invariant not in DEVICE_PROMISES or v.invariant in judged.promises]
    found += replay_violations(judged.promises, lambda: host_rows(records), config, step)
    if judged.problem and not any(v.invariant in ROOT_CAUSES for v in found):
        hint = {"hint": judged.hint} if judged.hint else {}
        found.append(violation("convention", step, judged.problem, config, judged.groups, **hint))
    if judged.unknown:
        found.append(violation("unknown_estimator", step, judged.unknown, config))
    return found


def batch_axis_note(judged: Judgement | None, config: MonitorConfig) -> str | None:
    """Under ``"auto"``, what to say when the identified estimator ignores the groups the rollout declares (a
    batch baseline: the wrong normalisation axis for GRPO, whose ``zero_group_mean`` breach it does not promise,
    so it would pass unseen); None when it uses them, or when an integration or the user declared it."""
    name = judged.name if judged is not None else None
    if config.estimator != "auto" or not ignores_groups(name):
        return None
    return (f"grpo-monitor: under estimator='auto' the advantages fit {name}, which ignores the groups the "
            "rollout declares (baseline and scale over the whole batch: the wrong normalisation axis for GRPO, "
            "so group means of the advantages are not 0 and are not checked); if your trainer means to run "
            f"{name}, declare MonitorConfig(std_convention={name!r}) to silence this")


def token_violations(v: dict[str, float], config: MonitorConfig, step: int,
                     mismatch_batches: Sequence[tuple[torch.Tensor, ...]] = (), lag: float = 0.0) -> list[Violation]:
    """Token-side invariants from the reduced token statistics of the step (:func:`grpo_monitor.invariants.tokens.
    token_violations`, given the step's mismatch readout of the same sums)."""
    return tokens.token_violations(v, config, step, mismatch_batches, lag, _readout(v))


def mismatch_violations(v: dict[str, float], config: MonitorConfig, step: int, lag: float = 0.0) -> list[Violation]:
    """``mismatch``: an error when the mismatch KL is far above numerical noise (unless the sampler lags by
    design), a warning when the importance weights do not average to 1; noise is never a violation."""
    readout = _readout(v)
    return tokens.mismatch_violations(v, readout, config, step, lag) if readout is not None else []


def _readout(v: dict[str, float]) -> dict[str, float] | None:
    from ..catalog.family_mismatch import mismatch_metrics

    return mismatch_metrics(v) if v.get("mm_tokens", 0) > 0 else None
