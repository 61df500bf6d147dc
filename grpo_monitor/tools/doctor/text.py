"""The diagnosis in words: what ``grpo-monitor doctor`` prints.

>>> from grpo_monitor.tools.doctor.diagnose import Diagnosis
>>> print(format_diagnosis(Diagnosis("run.jsonl", "monitor log", "trl", 3, 1, 3)))
grpo-monitor doctor: run.jsonl (monitor log, 3 steps: 1-3, integration trl)
run health: healthy (no finding opened)
"""

from __future__ import annotations

import math
from typing import Any

from .diagnose import STATUS_NAMES, Diagnosis, FindingRecord
from .recording import DEGENERATE


def format_diagnosis(d: Diagnosis) -> str:
    """The diagnosis as text: the status, each finding (evidence, remedies), what the recording cannot support."""
    lines = [f"grpo-monitor doctor: {d.source} ({d.kind}, {d.steps} steps: {d.first_step}-{d.last_step}, "
             f"integration {d.integration})"]
    if d.worst_status == 0 and not d.findings:
        lines.append("run health: healthy (no finding opened)")
    else:
        worst = STATUS_NAMES.get(d.worst_status, str(d.worst_status))
        at = f", first at step {d.worst_step}" if d.worst_step is not None else ""
        lines.append(f"run health: {worst}{at}; at the last step: {STATUS_NAMES.get(d.last_status, d.last_status)}")
    sources = {key: tag for tag, key in d.logged.items()}
    for record in d.findings:
        lines += _finding(record, d, sources)
    if d.unsupported:
        lines.append("")
        lines.append("not supported by this recording:")
        lines += [f"  {name}: {reason}" for name, reason in d.unsupported.items()]
    if d.notes:
        lines.append("")
        lines.append("notes:")
        lines += [f"  - {note}" for note in d.notes]
    return "\n".join(lines)


def _finding(r: FindingRecord, d: Diagnosis, sources: dict[str, str]) -> list[str]:
    state = r.last
    span = f"open since step {r.first_opened}" if r.cleared_at is None else \
        f"opened at step {r.first_opened}, cleared at step {r.cleared_at}"
    lines = ["", f"{r.worst.upper():9}{r.name}: {span}, {r.steps_open} of {d.steps} steps; figure "
                 f"{_number(state.get('figure'))}"]
    if state.get("message"):
        lines.append(f"  {state['message']}")
    evidence = state.get("evidence") or {}
    if evidence:
        lines.append("  evidence (last open step " + str(state.get("step", "?")) + "): " +
                     ", ".join(f"{key} {_number(value)}{_source(key, sources, d)}" for key, value in evidence.items()))
    for remedy in state.get("remedies") or ():
        lines.append(f"  remedy: {remedy}")
    return lines


def _source(key: str, sources: dict[str, str], d: Diagnosis) -> str:
    """Where a figure came from when it is not the monitor's own count."""
    if key == DEGENERATE and d.groups_from == "trl scalar":
        return " (TRL's frac_reward_zero_std: undercounts)"
    tag = sources.get(key)
    return f" (the trainer's {tag})" if tag is not None else ""


def _number(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:.4g}" if isinstance(value, (int, float)) else str(value)
