"""The one object a step hands to the sinks."""

from __future__ import annotations

import dataclasses
from typing import Any

from .violations import Violation


@dataclasses.dataclass
class StepReport:
    """What one ``end_step()`` produced.

    ``metrics`` maps the ``grpo/...`` keys to floats; ``histograms`` maps keys to lists of
    floats (e.g. the per-question reward std); ``tables`` maps a table name to rows;
    ``convention`` names the advantage estimator in use (declared or inferred; ``estimator``
    reads the same value: ``convention`` is its name in the JSONL record since 0.1).
    """

    step: int
    metrics: dict[str, float]
    violations: list[Violation] = dataclasses.field(default_factory=list)
    convention: str | None = None
    histograms: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    tables: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    flagged_questions: list[Any] = dataclasses.field(default_factory=list)
    #: True when a violation of this step is under the ``"raise"`` policy (the run ends).
    failed: bool = False
    #: The run record, on the first report of a monitor (and after a re-declaration or a reopen):
    #: ``{"integration": "trl" | "verl" | ... | "api", "settings": {...}, "config": MonitorConfig fields}``.
    run: dict[str, Any] | None = None
    #: The run-health verdict of the step (:class:`grpo_monitor.health.HealthUpdate`), None when not evaluated;
    #: the JSONL record's ``"health"`` field.
    health: Any = None
    #: The supply class ("saturated", "unsolved", "learnable") of each question this step folded into the
    #: history, by question id (the JSONL sink keeps ``questions.json`` from it); not part of the JSONL record.
    question_classes: dict[Any, str] = dataclasses.field(default_factory=dict)

    @property
    def estimator(self) -> str | None:
        """The advantage estimator in use: a registry name (declared or inferred), or None."""
        return self.convention

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready record the JSONL sink writes (one line per step)."""
        return {
            "step": self.step,
            "metrics": self.metrics,
            "violations": [v.to_dict() for v in self.violations],
            "convention": self.convention,
            "failed": self.failed,
            "histograms": self.histograms,
            "flagged_questions": [str(q) for q in self.flagged_questions],
            **({"run": self.run} if self.run is not None else {}),
            **({"health": self.health.to_dict()} if self.health is not None else {}),
        }
