"""The diagnosis of a finished run: the run-health findings over its steps, from one :class:`Recording`.

A grpo-monitor log that holds the live run's ``health`` records gives those verdicts as the run saw them;
every other recording is folded step by step through one :class:`~grpo_monitor.health.HealthTracker`
(the one a live run uses, :mod:`grpo_monitor.tools.reporting.health_timeline`), fed each step's metrics dict.
Findings whose evidence the recording does not hold are listed with the tracker's reason.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..reporting.health_timeline import STATUS, STATUS_NAMES, FindingRecord, timeline
from .recording import Recording

__all__ = ["STATUS", "Diagnosis", "FindingRecord", "diagnose", "fails"]


@dataclasses.dataclass
class Diagnosis:
    """What ``grpo-monitor doctor`` prints (text) or writes (``--json``)."""

    source: str
    kind: str
    integration: str
    steps: int
    first_step: int
    last_step: int
    worst_status: int = 0
    worst_step: int | None = None
    last_status: int = 0
    findings: list[FindingRecord] = dataclasses.field(default_factory=list)
    unsupported: dict[str, str] = dataclasses.field(default_factory=dict)
    groups_from: str = ""
    logged: dict[str, str] = dataclasses.field(default_factory=dict)
    verdicts_from: str = "tracker"  # "recorded" when the live run's health records were read
    notes: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with the statuses by name beside their numbers."""
        out = dataclasses.asdict(self)
        out["worst_status_name"] = STATUS_NAMES.get(self.worst_status, str(self.worst_status))
        out["last_status_name"] = STATUS_NAMES.get(self.last_status, str(self.last_status))
        return out


def diagnose(recording: Recording, config: Any = None) -> Diagnosis:
    """Fold the recording's steps into a :class:`Diagnosis` (``config``: the ``MonitorConfig`` whose health
    settings apply; default: the defaults, with the group size the run declared)."""
    steps = sorted(recording.steps)
    found = timeline(steps, recording.steps, recording.health, recording.integration,
                     config if config is not None else _config(recording), recompute=recording.kind != "monitor log")
    # a scan's log (and a replay) holds verdicts of a replay: recomputed without its timing, remedies for the trainer
    unsupported = {**found.unsupported, **_partly(recording.keys(), {f.name for f in found.findings})}
    return Diagnosis(str(recording.source), recording.kind, recording.integration, len(steps), steps[0], steps[-1],
                     worst_status=found.worst_status, worst_step=found.worst_step, last_status=found.last_status,
                     findings=found.findings, unsupported=unsupported, groups_from=recording.groups_from,
                     logged=dict(recording.logged), verdicts_from="recorded" if found.recorded else "tracker",
                     notes=list(recording.notes))


#: Evidence without which a finding's first key alone cannot open it: (finding, the key it has, keys one of which
#: it also needs, why).
_PARTLY = (("truncation_dominated", "grpo/rows/truncated_rate",
            ("grpo/tokens/valid", "grpo/tokens/rows", "grpo/groups/degenerate_truncated_rate"),
            "the recording has the truncated share but not whether the truncated rows lose their signal (masked out "
            "of the loss, or leaving their groups degenerate at the bottom): no loss-mask counts and no per-group "
            "truncation; run with the monitor attached, or record the rollouts"),)


def _partly(keys: set[str], opened: set[str]) -> dict[str, str]:
    """Findings the recording holds the first evidence of but not the rest they need (none that opened)."""
    return {name: why for name, has, needs, why in _PARTLY
            if name not in opened and has in keys and not keys & set(needs)}


def _config(recording: Recording) -> Any:
    from ...config import MonitorConfig

    size = recording.settings.get("num_generations")
    return MonitorConfig(group_size=size) if isinstance(size, int) and size >= 2 else MonitorConfig()


def fails(diagnosis: Diagnosis, fail_on: str | None) -> bool:
    """Whether the run's worst status reached ``fail_on`` (``degraded`` or ``stalled``; None: never)."""
    return fail_on is not None and diagnosis.worst_status >= STATUS[fail_on]
