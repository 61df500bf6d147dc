"""What the health layer hands out: one open finding (:class:`FindingState`), one step's verdict
(:class:`HealthUpdate`) and the per-question supply it reads (:class:`QuestionSupply`). Plain frozen data."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

#: ``grpo/health/status`` values.
HEALTHY, DEGRADED, STALLED = 0, 1, 2
STATUS_NAMES = {HEALTHY: "healthy", DEGRADED: "degraded", STALLED: "stalled"}
STATUS_OF = {"info": HEALTHY, "degraded": DEGRADED, "stalled": STALLED}
STATUS_KEY = "grpo/health/status"
WASTED_KEY = "grpo/health/wasted_generation_frac"


def _plain(value: float) -> float | None:
    """A JSON-ready number: NaN and infinities become None."""
    return float(value) if math.isfinite(value) else None


@dataclasses.dataclass(frozen=True)
class FindingState:
    """One open finding at ``step``: open since ``since``, its main figure, the evidence numbers it read, the
    one-paragraph message (what, the numbers, the likely cause) and the remedies for the run's integration."""

    name: str
    severity: str
    step: int
    since: int
    figure: float
    evidence: Mapping[str, float]
    message: str
    remedies: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN as None)."""
        return {"name": self.name, "severity": self.severity, "step": self.step, "since": self.since,
                "figure": _plain(self.figure), "evidence": {k: _plain(v) for k, v in self.evidence.items()},
                "message": self.message, "remedies": list(self.remedies)}

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> FindingState:
        """Back from :meth:`to_dict` (None figures as NaN)."""
        def num(v: Any) -> float:
            return math.nan if v is None else float(v)

        return cls(record["name"], record["severity"], int(record["step"]), int(record["since"]),
                   num(record.get("figure")), {k: num(v) for k, v in (record.get("evidence") or {}).items()},
                   record.get("message", ""), tuple(record.get("remedies") or ()))


@dataclasses.dataclass(frozen=True)
class HealthUpdate:
    """One step's verdict: ``status`` (0 healthy, 1 degraded, 2 stalled), the ``active`` findings, those
    ``opened`` and the names ``cleared`` at this step, and the ``grpo/health/*`` ``metrics``."""

    status: int
    active: tuple[FindingState, ...] = ()
    opened: tuple[FindingState, ...] = ()
    cleared: tuple[str, ...] = ()
    metrics: Mapping[str, float] = dataclasses.field(default_factory=dict)

    @property
    def status_name(self) -> str:
        """``"healthy"``, ``"degraded"`` or ``"stalled"``."""
        return STATUS_NAMES[self.status]

    def to_dict(self) -> dict[str, Any]:
        """The JSONL record's ``health`` field."""
        return {"status": self.status, "active": [f.to_dict() for f in self.active],
                "opened": [f.name for f in self.opened], "cleared": list(self.cleared)}

    def status_line(self) -> str:
        """One line for the console: the status and each active finding with its figure, the worst first."""
        if not self.active:
            return "run health: healthy"
        worst = sorted(self.active, key=lambda f: -STATUS_OF.get(f.severity, 0))
        parts = [f"{f.name} ({f.severity}, {_short(f.figure)}, since step {f.since})" for f in worst]
        return f"run health: {self.status_name}: " + "; ".join(parts)


def _short(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:.3g}"


@dataclasses.dataclass(frozen=True)
class QuestionSupply:
    """The per-question history's classes: questions tracked, how many were seen at least twice, and of those
    seen at least once how many were saturated (every group all at the top reward) at every sighting, unsolved
    (all at the bottom) at every sighting, or learnable (any other sighting)."""

    questions: int
    repeated: int
    saturated: int
    unsolved: int
    learnable: int
    repeated_saturated: int = 0
    repeated_unsolved: int = 0

    def shares(self) -> dict[str, float]:
        """The classes as shares of the questions seen at least twice (of all when none repeats yet)."""
        if self.repeated > 0:
            sat, uns, total = self.repeated_saturated, self.repeated_unsolved, self.repeated
        else:
            sat, uns, total = self.saturated, self.unsolved, self.questions
        if total <= 0:
            return {}
        return {"saturated": sat / total, "unsolved": uns / total, "learnable": (total - sat - uns) / total}
