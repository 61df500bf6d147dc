"""Every invariant the monitor checks, in one package: each one's record, its device mask and its host decision.

One module per kind, each holding its records (``RECORDS``) beside the code that checks them:

- :mod:`.rollout`: group by group on the rollout (a device mask per group, summed into ``viol_<name>``; the
  breach text and the float32-residue rule on the host);
- :mod:`.estimator`: what the step's advantage estimator keeps (pass@k's one nonzero row, one convention, a
  known estimator), and the promises that only judge an estimator; :mod:`.universal`: what every estimator keeps;
- :mod:`.tokens`: from the fused token pass's sums; :mod:`.declared`: a declared check gets its inputs;
- :mod:`.weights`: the loss aggregation, on the step's gathered rows; :mod:`.trainer`: the trainer's own numbers;
- :mod:`.probes`: the audit's probe invariants (data and pure functions the audit tool imports).

:data:`INVARIANTS` (also ``grpo_monitor.INVARIANTS``) holds the records in that order; the keys of
``MonitorConfig.policies``, the estimators' ``PROMISES``, the device-side promise filter, the root-cause
rule, every breach message and ``docs/invariants.md`` derive from them. This package imports nothing else
of grpo_monitor: statistics, estimators, checks and the config import it.
"""

from __future__ import annotations

from . import declared, estimator, rollout, tokens, trainer, weights
from .record import Invariant, Severity, Side, Violation, register, violation
from .rollout import RESIDUE_RULE

#: Every invariant the monitor checks, by name (the keys of ``MonitorConfig.policies``).
INVARIANTS: dict[str, Invariant] = register(*rollout.RECORDS, *estimator.RECORDS, *tokens.RECORDS,
                                            *declared.RECORDS, *weights.RECORDS, *trainer.RECORDS)

#: What an estimator may promise of the invariants (the others every estimator must keep).
PROMISED: dict[str, str] = {inv.name: inv.promise for inv in INVARIANTS.values() if inv.promise is not None}
#: Everything an estimator may promise: :data:`PROMISED` and the promises that only judge it.
PROMISES: dict[str, str] = {**PROMISED, **estimator.JUDGE_PROMISES}
#: Rollout invariants an estimator may promise, checked by the device-side fit.
DEVICE_PROMISES: tuple[str, ...] = tuple(i.name for i in rollout.RECORDS if i.promise is not None)
#: Breaches that explain an estimator misfit by themselves (no ``convention`` finding on top).
ROOT_CAUSES: tuple[str, ...] = tuple(i.name for i in INVARIANTS.values() if i.root_cause)
#: Invariants checked group by group on the rollout, in check order.
GROUP_INVARIANTS: tuple[str, ...] = tuple(i.name for i in rollout.RECORDS)


def invariant(name: str) -> Invariant:
    """The record of ``name``, with a worded error listing the known names."""
    try:
        return INVARIANTS[name]
    except KeyError:
        raise KeyError(f"unknown invariant {name!r}; expected one of {sorted(INVARIANTS)}") from None


__all__ = ["DEVICE_PROMISES", "GROUP_INVARIANTS", "INVARIANTS", "PROMISED", "PROMISES", "RESIDUE_RULE",
           "ROOT_CAUSES", "Invariant", "Severity", "Side", "Violation", "invariant", "violation"]
