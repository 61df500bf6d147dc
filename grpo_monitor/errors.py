"""The monitor's exceptions that end a run on the user's request (other than an invariant breach)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class RunStalled(RuntimeError):
    """A run-health finding matched ``MonitorConfig.halt_on`` after holding for its patience.

    Not an invariant breach: every update was computed right, the run is just not learning.
    ``findings`` holds the matching :class:`~grpo_monitor.health.FindingState` records.
    """

    def __init__(self, findings: Sequence[Any]):
        self.findings = tuple(findings)
        names = ", ".join(f"{f.name} ({f.severity} since step {f.since})" for f in self.findings)
        text = f"grpo-monitor: the run stalled: {names}; MonitorConfig.halt_on stopped it"
        details = "\n".join(f"- {f.message}" for f in self.findings)
        super().__init__(f"{text}\n{details}" if details else text)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.findings,))
