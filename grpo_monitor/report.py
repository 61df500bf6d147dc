"""The one object a step hands to the sinks."""

from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Any

from .violations import Violation

_warned: list[bool] = []
_UNSET: Any = object()


def _renamed() -> None:
    """One ``DeprecationWarning`` per process for ``StepReport.convention``."""
    if not _warned:
        _warned.append(True)
        warnings.warn("StepReport.convention is deprecated: it is StepReport.estimator (same value); the old name "
                      "keeps working", DeprecationWarning, stacklevel=3)


@dataclasses.dataclass
class StepReport:
    """What one ``end_step()`` produced.

    ``metrics`` maps the ``grpo/...`` keys to floats; ``histograms`` maps keys to lists of
    floats (e.g. the per-question reward std); ``tables`` maps a table name to rows;
    ``estimator`` names the advantage estimator in use (declared or inferred). ``convention``, its
    0.1 name, still reads and sets it (and ``StepReport(convention=...)`` still constructs) with one
    ``DeprecationWarning``; the JSONL record keeps a
    ``"convention"`` key beside ``"estimator"`` for the readers of 0.1 logs.
    """

    step: int
    metrics: dict[str, float]
    violations: list[Violation] = dataclasses.field(default_factory=list)
    estimator: str | None = None
    histograms: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    tables: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    flagged_questions: list[Any] = dataclasses.field(default_factory=list)
    #: True when a violation of this step is under the ``"raise"`` policy (the run ends).
    failed: bool = False
    #: The run record, on the first report of a monitor (and after a re-declaration or a reopen):
    #: ``{"integration": "trl" | "verl" | ... | "api", "settings": {...}, "config": MonitorConfig fields}``.
    run: dict[str, Any] | None = None
    #: The trainer's own logged values against the exact ones, one row per audited key
    #: (``GRPOMonitor.audit_trainer_metrics``; ``grpo_monitor.step.trainer_audit.AuditRow``).
    trainer_metrics: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: The run-health verdict of the step (:class:`grpo_monitor.health.HealthUpdate`), None when not evaluated;
    #: the JSONL record's ``"health"`` field.
    health: Any = None
    #: The supply class ("saturated", "unsolved", "learnable") of each question this step folded into the
    #: history, by question id (the JSONL sink keeps ``questions.json`` from it); not part of the JSONL record.
    question_classes: dict[Any, str] = dataclasses.field(default_factory=dict)

    @property
    def convention(self) -> str | None:
        """Deprecated: :attr:`estimator` under its 0.1 name."""
        _renamed()
        return self.estimator

    @convention.setter
    def convention(self, name: str | None) -> None:
        _renamed()
        self.estimator = name

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready record the JSONL sink writes (one line per step)."""
        return {
            "step": self.step,
            "metrics": self.metrics,
            "violations": [v.to_dict() for v in self.violations],
            "estimator": self.estimator,
            "convention": self.estimator,  # the 0.1 key, kept for the readers of older logs
            "failed": self.failed,
            "histograms": self.histograms,
            "flagged_questions": [str(q) for q in self.flagged_questions],
            **({"run": self.run} if self.run is not None else {}),
            **({"trainer_metrics": self.trainer_metrics} if self.trainer_metrics else {}),
            **({"health": self.health.to_dict()} if self.health is not None else {}),
        }


_fields_init = StepReport.__init__


@functools.wraps(_fields_init)
def _init(self: StepReport, *args: Any, convention: Any = _UNSET, **kwargs: Any) -> None:
    """The dataclass's ``__init__``, taking ``convention=`` (the 0.1 keyword) as ``estimator=`` with one warning."""
    if convention is not _UNSET:
        _renamed()
        if kwargs.get("estimator", convention) != convention:
            raise ValueError(f"StepReport: estimator={kwargs['estimator']!r} and convention={convention!r} name two "
                             "estimators (convention is the older name of estimator): pass one")
        kwargs["estimator"] = convention
    _fields_init(self, *args, **kwargs)


StepReport.__init__ = _init  # type: ignore[method-assign]
