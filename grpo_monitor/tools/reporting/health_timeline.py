"""A run's health over its steps: the verdicts per step (recorded live, or recomputed) folded per finding.

Shared by the report's Run health panel and ``grpo-monitor doctor``: a log whose records hold the live
run's ``health`` field gives those verdicts as the run saw them; otherwise the steps' metrics are folded
through one :class:`~grpo_monitor.health.HealthTracker`, the one a live run uses.

>>> t = fold([(1, {"status": 0}), (2, {"status": 1, "active": [{"name": "x", "severity": "degraded", "since": 2}]}),
...           (3, {"status": 0, "cleared": ["x"]})])
>>> t.worst_status, t.worst_step, t.last_status, [(r.name, r.first_opened, r.cleared_at) for r in t.findings]
(1, 2, 0, [('x', 2, 3)])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

#: ``grpo/health/status`` values by name, and the status each severity sets.
STATUS = {"healthy": 0, "degraded": 1, "stalled": 2}
STATUS_NAMES = {v: k for k, v in STATUS.items()}
SEVERITY_STATUS = {"info": 0, "degraded": 1, "stalled": 2}


@dataclasses.dataclass
class FindingRecord:
    """One finding over the run: when it opened first, cleared last, how many steps it was open, its last state."""

    name: str
    severity: str
    first_opened: int
    steps_open: int = 0
    cleared_at: int | None = None  # the last clearing, None when open at the last step
    last: dict[str, Any] = dataclasses.field(default_factory=dict)  # FindingState.to_dict() at its last open step
    worst: str = "info"  # the worst severity it held
    open_steps: list[int] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Timeline:
    """The fold of a run's verdicts."""

    worst_status: int = 0
    worst_step: int | None = None
    last_status: int = 0
    findings: list[FindingRecord] = dataclasses.field(default_factory=list)
    recorded: bool = False  # the live run's verdicts (else recomputed)
    unsupported: dict[str, str] = dataclasses.field(default_factory=dict)


def fold(verdicts: Iterable[tuple[int, Mapping[str, Any]]]) -> Timeline:
    """Fold (step, ``HealthUpdate.to_dict()``) pairs in step order into a :class:`Timeline`."""
    out, records = Timeline(), dict[str, FindingRecord]()
    for step, verdict in verdicts:
        status = int(verdict.get("status", 0))
        if status > out.worst_status:
            out.worst_status, out.worst_step = status, step
        out.last_status = status
        for state in verdict.get("active", ()):
            record = records.get(state["name"])
            if record is None:
                record = records[state["name"]] = FindingRecord(state["name"], state["severity"],
                                                                int(state.get("since", step)))
            record.steps_open += 1
            record.open_steps.append(step)
            record.last, record.cleared_at, record.severity = dict(state), None, state["severity"]
            if SEVERITY_STATUS.get(state["severity"], 0) >= SEVERITY_STATUS.get(record.worst, 0):
                record.worst = state["severity"]
        for name in verdict.get("cleared", ()):
            if name in records:
                records[name].cleared_at = step
    out.findings = sorted(records.values(), key=lambda r: (-SEVERITY_STATUS.get(r.worst, 0), r.first_opened))
    return out


#: Findings that read more than the per-step metrics (the per-question supply): a recomputation takes them
#: from the recorded verdicts when there are some.
FROM_RECORDS = ("prompt_supply",)


def timeline(steps: Iterable[int], metrics: Mapping[int, Mapping[str, float]],
             recorded: Mapping[int, Mapping[str, Any]], integration: str = "api", config: Any = None,
             recompute: bool = False) -> Timeline:
    """The run's :class:`Timeline`: the recorded verdicts when every step has one (unless ``recompute``), else
    the tracker's over ``metrics`` (the :data:`FROM_RECORDS` findings still from the records, their remedies
    for ``integration``); the findings the metrics cannot support, with the tracker's reason."""
    from ...config import MonitorConfig
    from ...health import HealthTracker
    from ...health.catalog import INTEGRATIONS

    order = sorted(steps)
    known = integration if integration in INTEGRATIONS else "api"
    tracker = HealthTracker(config if config is not None else MonitorConfig(), integration=known)
    if order and not recompute and all(s in recorded for s in order):
        out = fold((s, recorded[s]) for s in order)
        out.recorded = True
    else:
        out = fold((s, _merge(tracker.update(s, dict(metrics.get(s, {}))).to_dict(), recorded.get(s), known))
                   for s in order)
    out.unsupported = dict(tracker.unsupported({k for m in metrics.values() for k in m}))
    return out


def _merge(computed: dict[str, Any], recorded: Mapping[str, Any] | None, integration: str) -> dict[str, Any]:
    """``computed`` with the :data:`FROM_RECORDS` findings of ``recorded`` (remedies for ``integration``)."""
    if not recorded:
        return computed
    from ...health.catalog import FINDINGS

    def mine(name: str) -> bool:
        return name in FROM_RECORDS

    taken = [{**a, "remedies": list(FINDINGS[a["name"]].remedies_for(integration))}
             for a in recorded.get("active", ()) if mine(a["name"]) and a["name"] in FINDINGS]
    active = [a for a in computed["active"] if not mine(a["name"])] + taken
    def names(field: str) -> list[str]:
        return [n for n in computed[field] if not mine(n)] + [n for n in recorded.get(field, ()) if mine(n)]

    return {"status": max((SEVERITY_STATUS.get(a["severity"], 0) for a in active), default=0), "active": active,
            "opened": names("opened"), "cleared": names("cleared")}
