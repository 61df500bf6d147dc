"""Violations as data: a small record first (:class:`Violation`), an exception or a warning second.

:func:`violation` builds one from its invariant's record (hint, expected value, default severity); every
kind module's host decision returns its breaches so.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .record import REGISTRY, MonitorConfig


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
