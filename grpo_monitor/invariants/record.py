"""The two records: an invariant (:class:`Invariant`) and one breach of it (:class:`Violation`), and the registry
every kind module's invariants are entered in.

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
modules' ``RECORDS`` in their order; it is ``grpo_monitor.INVARIANTS``. Violations are data: a small record
first (:func:`violation` builds one from its invariant's record), an exception or a warning second.
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


@dataclasses.dataclass(frozen=True)
class Violation:
    """One invariant breach at one step.

    ``observed`` and ``expected`` are short human-readable values, ``groups`` holds the
    first offending group ids (as the user passed them), ``hint`` the likely cause, and
    ``repro_path`` the file holding the offending tensors, when one was saved, else
    ``repro_error`` why it could not be (the breach is raised all the same). ``severity``:
    ``"error"`` or ``"warning"`` (logged, counted, alerted at WARN; never stops the run).
    """

    invariant: str
    step: int
    observed: Any
    expected: Any
    groups: tuple = ()
    hint: str = ""
    repro_path: str | None = None
    count: int = 1
    repro_error: str | None = None
    severity: str = "error"  # "error" stops the run under on_violation="raise"; "warning" never does

    def message(self) -> str:
        """The one-paragraph message shown in errors, warnings and alerts."""
        desc = REGISTRY.get(self.invariant, self.invariant)
        what = "broken" if self.severity == "error" else "warning"
        text = (
            f"step {self.step}: invariant '{self.invariant}' {what} ({desc}); "
            f"observed {self.observed}, expected {self.expected}"
        )
        if self.groups:
            text += f"; first offending groups: {list(self.groups)}"
        if self.hint:
            text += f". Likely cause: {self.hint}"
        if self.repro_path and getattr(REGISTRY.get(self.invariant), "side", None) == "tokens":
            text += (  # the monitor sums token tensors on the device: none are kept to save
                f". The step's config and rollouts (no token tensors: only their sums are kept) saved to "
                f"{self.repro_path}; load with `grpo_monitor.load_repro({self.repro_path!r})`"
            )
        elif self.repro_path:
            text += (
                f". Offending tensors saved to {self.repro_path}; reproduce with "
                f"`grpo_monitor.load_repro({self.repro_path!r})`"
            )
        elif self.repro_error:
            text += f"; repro not saved: {self.repro_error}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (observed/expected stringified when not plain numbers)."""
        out = dataclasses.asdict(self)
        out["groups"] = [_jsonable(g) for g in self.groups]
        out["observed"] = _jsonable(self.observed)
        out["expected"] = _jsonable(self.expected)
        out["message"] = self.message()
        return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return str(value)


def violation(name: str, step: int, observed: str, config: MonitorConfig, groups: tuple = (), **kw) -> Violation:
    """A :class:`Violation` of ``name`` with its registry hint, expected value and default severity."""
    inv = REGISTRY[name]
    kw.setdefault("severity", inv.severity)
    hint = kw.pop("hint", inv.hint)
    return Violation(name, step, observed, inv.expected(config), groups, hint, **kw)
