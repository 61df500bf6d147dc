"""The record of an invariant (:class:`Invariant`) and the registry every kind module's records are entered in.

Each :class:`Invariant` holds the one-line statement a reader sees in every message, the
likely cause (hint), the tolerance field of :class:`~grpo_monitor.config.Tolerances` it is
measured with, its default severity, and the expected value a breach message shows,
derived from the config. Breach messages, the README's invariants table (``docs/invariants.md``,
generated), the dashboards' per-invariant panels and ``MonitorConfig.policies`` all read it.

Severity: an ``"error"`` stops the run under ``on_violation="raise"``; a ``"warning"`` is
logged, counted (``grpo/invariants/<name>``) and alerted at WARN level, and never stops
the run. An invariant's severity can be lowered for one breach by the rule that judges it
(see :data:`grpo_monitor.invariants.rollout.RESIDUE_RULE`).

:data:`REGISTRY` is filled once, in :mod:`grpo_monitor.invariants`' ``__init__``, from the kind
modules' ``RECORDS`` in their order; it is ``grpo_monitor.INVARIANTS``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

#: A :class:`~grpo_monitor.config.MonitorConfig` (config.py reads this catalogue, so it is not imported here).
MonitorConfig = Any

Severity = Literal["error", "warning"]
Side = Literal["rollout", "tokens", "steps", "replay", "audit"]


@dataclasses.dataclass(frozen=True)
class Invariant:
    """One invariant: what must hold, why it usually breaks, and how it is measured.

    ``str(invariant)`` is its statement, so ``f"{INVARIANTS[name]}"`` reads as a sentence.
    """

    name: str
    statement: str
    hint: str
    side: Side
    tolerance: str | None  # field of Tolerances, or None when the check is exact
    severity: Severity
    expected: Callable[[MonitorConfig], str]
    #: What an estimator promises when it promises this invariant (exact, for batches whose groups have
    #: two or more scorable rows); None: every estimator must keep it (a universal invariant).
    promise: str | None = None
    #: A breach that explains an estimator misfit by itself: no ``convention`` finding is added on top.
    root_cause: bool = False
    #: Each finding is new (its producer says every one once per run): every one is logged and warned.
    said_once: bool = False

    def __str__(self) -> str:
        return self.statement


def tol(field: str, text: str) -> Callable[[MonitorConfig], str]:
    """The expected text of a relative check: ``text`` with the tolerance field's value in ``{}``."""
    return lambda cfg: text.format(getattr(cfg.tolerances, field))


#: Every invariant the monitor checks, by name, in the kind modules' order (filled by :func:`register`).
REGISTRY: dict[str, Invariant] = {}


def register(*records: Invariant) -> dict[str, Invariant]:
    """Enter ``records`` in :data:`REGISTRY` (a name twice is a programming error); the registry."""
    for record in records:
        if record.name in REGISTRY:
            raise ValueError(f"invariant {record.name!r} is registered twice")
        REGISTRY[record.name] = record
    return REGISTRY
