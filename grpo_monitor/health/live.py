"""The health layer inside the monitor: one :class:`HealthTracker` fed each step's report (already-synced host
floats, so no device sync), the seconds between steps, the question supply; the alerts of a finding's onset and
clearing, and the findings ``MonitorConfig.halt_on`` stops the run on."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

from ..report import StepReport
from .state import FindingState, HealthUpdate, QuestionSupply
from .tracker import HealthTracker

#: A step is judged when its report has one of these (a rollout, or the loss's tokens).
JUDGED = ("grpo/groups/total", "grpo/tokens/valid")


class History(Protocol):
    """What run health reads of the run's per-question history (``grpo_monitor.run.history.QuestionHistory``;
    the run package imports this one, never the reverse)."""

    @property
    def touched(self) -> Mapping[Any, str]: ...

    def supply(self) -> Mapping[str, int]: ...


def supply_of(history: History) -> QuestionSupply | None:
    """The history's supply classes (None before any question id was seen)."""
    counts = history.supply()
    questions = sum(counts[k] for k in ("saturated", "unsolved", "learnable"))
    if not questions:
        return None
    repeated = sum(counts[f"repeated_{k}"] for k in ("saturated", "unsolved", "learnable"))
    return QuestionSupply(questions, repeated, counts["saturated"], counts["unsolved"], counts["learnable"],
                          counts["repeated_saturated"], counts["repeated_unsolved"])


class LiveHealth:
    """What :class:`~grpo_monitor.monitor.GRPOMonitor` keeps for run health (``state_dict`` saves the tracker)."""

    def __init__(self, config: Any, integration: str = "api", gpus: int = 1):
        self.config, self.gpus = config, gpus
        self.tracker = HealthTracker(config, integration, gpus=gpus)
        self._last: float | None = None  # monotonic time of the previous step's end

    def declare(self, config: Any, integration: str) -> None:
        """A new config or integration: the rules read it from now on, the memory is kept."""
        from .tracker import context_of

        self.config = config
        self.tracker.context = context_of(config, integration, self.gpus)

    def evaluate(self, report: StepReport, history: History) -> HealthUpdate | None:
        """Fold the report in: ``report.health``, its ``grpo/health/*`` metrics and ``question_classes``. A step
        without rollout or token metrics (nothing observed, or its metrics lost to a fault) is not judged."""
        if not any(key in report.metrics for key in JUDGED):
            return None
        now = time.monotonic()
        seconds, self._last = (None if self._last is None else now - self._last), now
        update = self.tracker.update(report.step, report.metrics, seconds=seconds, supply=supply_of(history))
        report.health = update
        report.metrics.update(update.metrics)
        report.question_classes = dict(history.touched)
        return update

    def halting(self, report: StepReport) -> tuple[FindingState, ...]:
        """The active findings ``halt_on`` names (empty: go on)."""
        if report.health is None or not self.config.halt_on:
            return ()
        wanted = self.tracker.matching(self.config.halt_on)
        return tuple(f for f in report.health.active if f in wanted)

    @staticmethod
    def alerts(update: HealthUpdate | None, step: int) -> list[tuple[str, str, str]]:
        """(title, text, level) of each finding opened or cleared at this step."""
        if update is None:
            return []
        out = []
        for f in update.opened:
            level = "ERROR" if f.severity == "stalled" else "WARN" if f.severity == "degraded" else "INFO"
            remedy = f" Try: {'; '.join(f.remedies)}." if f.remedies else ""
            out.append((f"grpo-monitor: {f.name} ({f.severity})", f"{f.message}{remedy}", level))
        for name in update.cleared:
            out.append((f"grpo-monitor: {name} cleared", f"The run-health finding {name} no longer holds at step "
                        f"{step}.", "INFO"))
        return out

    @classmethod
    def alert(cls, report: StepReport, sinks: Any) -> None:
        """Each finding opened or cleared at ``report``'s step, as an alert through ``sinks``."""
        for title, text, level in cls.alerts(report.health, report.step):
            sinks.alert(title, text, level)

    def restored(self, state: dict[str, Any] | None) -> LiveHealth:
        """A fresh one of the same config and integration, holding ``state`` (None: empty)."""
        fresh = LiveHealth(self.config, self.tracker.context.integration, self.gpus)
        if state is not None:
            fresh.load_state_dict(state)
        return fresh

    def state_dict(self) -> dict[str, Any]:
        return self.tracker.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tracker.load_state_dict(state)
        self._last = None
