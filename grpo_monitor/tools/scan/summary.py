"""The terminal summary of a scan: trends (start against end, worded as the report), questions, violations by step.

The trends are read back from the ``monitor.jsonl`` the scan wrote (two streaming passes:
memory does not grow with the steps); violations are folded in as the steps go by.

>>> step_ranges([3, 4, 5, 9, 11, 12])
'3-5, 9, 11-12'
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...catalog.families import TREND_ROWS
from ..reporting.facts import plural
from ..reporting.numbers import number, plain

#: A :class:`~grpo_monitor.tools.scan.run.ScanResult` (run.py imports this module, so it is not imported here).
ScanResult = Any

#: (label, metric key, format) of the trend table; the metric families' rows (their ``trends``) follow.
TRENDS: tuple[tuple[str, str, str], ...] = (
    ("degenerate rate", "grpo/groups/degenerate_rate", "{:.1%}"),
    ("  iid prediction", "grpo/groups/degenerate_rate_iid", "{:.1%}"),
    ("effective prompts / step", "grpo/groups/effective_prompts", "{:.1f}"),
    ("groups / step", "grpo/groups/total", "{:.1f}"),
    ("reward mean", "grpo/reward/mean", "{:.4g}"),
    ("overdispersion", "grpo/groups/overdispersion", "{:.3f}"),
    ("unscorable rows / step", "grpo/rows/unscorable", "{:.1f}"),
    *TREND_ROWS,
)
TREND_KEYS: tuple[str, ...] = tuple(k for _, k, _ in TRENDS)
MAX_RANGES = 8


def is_error(violation: Any) -> bool:
    """Whether a violation is error-severity (anything not marked ``severity="warning"``)."""
    return getattr(violation, "severity", "error") != "warning"


def step_ranges(steps: Sequence[int], limit: int = MAX_RANGES) -> str:
    """Consecutive steps as ``a-b`` ranges, at most ``limit`` of them (then ``...``)."""
    ranges: list[list[int]] = []
    for s in steps:
        if ranges and s == ranges[-1][1] + 1:
            ranges[-1][1] = s
        else:
            ranges.append([s, s])
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:limit]]
    return ", ".join(parts) + (", ..." if len(ranges) > limit else "")


@dataclasses.dataclass
class InvariantLog:
    """One invariant's breaches over a scan: first and last step, how many steps, the first message."""

    invariant: str
    error: bool
    first_step: int
    last_step: int
    message: str
    steps: int = 0
    count: int = 0
    ranges: list[list[int]] = dataclasses.field(default_factory=list)

    def add_step(self, step: int, count: int) -> None:
        self.steps += 1
        self.count += count
        self.last_step = step
        if self.ranges and step == self.ranges[-1][1] + 1:
            self.ranges[-1][1] = step
        elif len(self.ranges) <= MAX_RANGES:
            self.ranges.append([step, step])

    def range_text(self) -> str:
        parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in self.ranges[:MAX_RANGES]]
        return ", ".join(parts) + (", ..." if len(self.ranges) > MAX_RANGES else "")


class ViolationLog:
    """Violations of a scan by invariant, in the order they first broke."""

    def __init__(self) -> None:
        self.by_invariant: dict[str, InvariantLog] = {}

    def add(self, report: Any) -> None:
        """Fold in one ``StepReport``'s violations."""
        seen: dict[str, int] = {}
        for v in report.violations:
            seen[v.invariant] = seen.get(v.invariant, 0) + 1
            if v.invariant not in self.by_invariant:
                self.by_invariant[v.invariant] = InvariantLog(v.invariant, is_error(v), report.step, report.step,
                                                              v.message())
            elif is_error(v):
                self.by_invariant[v.invariant].error = True
        for name, count in seen.items():
            self.by_invariant[name].add_step(report.step, count)

    @property
    def errors(self) -> int:
        """Invariants broken with error severity."""
        return sum(log.error for log in self.by_invariant.values())


def _records(path: Path):
    with open(path, "rb") as f:
        for raw in f:
            try:
                record = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and isinstance(record.get("metrics"), dict):
                yield record


def trends(log: Path, keys: Sequence[str] = TREND_KEYS) -> tuple[dict[str, tuple[float, float]], list[str]]:
    """Per key, the start and the end of the run as the report compares them (the mean over the first and the
    last tenth of the steps from 10 steps on, else the first and the last step), and the two column headers
    worded as the report words them (:func:`grpo_monitor.tools.reporting.facts.span_labels`)."""
    from ..reporting.facts import span_labels, spans

    total = sum(1 for _ in _records(log))
    tenth = spans(max(1, total)).size
    sums = {k: [0.0, 0, 0.0, 0] for k in keys}
    at: dict[int, int] = {}  # record index -> step, at the edges of both spans
    for i, record in enumerate(_records(log)):
        if i in (0, tenth - 1, total - tenth, total - 1):
            at[i] = int(record.get("step", i))
        metrics = record["metrics"]
        for k in keys:
            value = metrics.get(k)
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                continue
            acc = sums[k]
            if i < tenth:
                acc[0] += value
                acc[1] += 1
            if i >= total - tenth:
                acc[2] += value
                acc[3] += 1
    values = {k: (a / n if n else math.nan, b / m if m else math.nan) for k, (a, n, b, m) in sums.items()}
    if not at:
        return values, ["first", "last"]
    head, tail = (at[0], at[tenth - 1]), (at[total - tenth], at[total - 1])
    return values, span_labels(total, head, tail, dash="-")


def format_summary(result: ScanResult, questions_shown: int = 5) -> str:
    """The summary printed after a scan."""
    rate = result.rows / result.seconds if result.seconds > 0 else math.inf
    lines = [
        f"grpo-monitor scan: {result.source} ({result.format}): {result.steps:,} steps "
        f"({result.first_step}..{result.last_step}), {result.rows:,} rows, {result.groups:,} groups "
        f"in {result.seconds:.1f} s ({rate:,.0f} rows/s)",
        f"  monitor: group_size={result.config.get('group_size')}, estimator="
        f"{result.config.get('estimator')}{_source(result.config)}, advantages "
        f"{'recorded' if result.advantages else 'not recorded'}",
    ]
    found, headers = trends(result.log)
    rows = [(label, [number(v, fmt, key) for v in found[key][:len(headers)]]) for label, key, fmt in TRENDS
            if any(math.isfinite(v) for v in found[key])]
    widths = [max([len(h)] + [len(cells[i]) for _, cells in rows]) for i, h in enumerate(headers)]
    lines.append(f"  {'':26}" + "  ".join(f"{h:>{w}}" for h, w in zip(headers, widths, strict=True)))
    lines += [f"  {label:26}" + "  ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True))
              for label, cells in rows]
    lines += _question_lines(result, questions_shown)
    lines += _violation_lines(result)
    lines += [f"  note: {plain(n)}" for n in result.notes[:10]]
    if len(result.notes) > 10:
        lines.append(f"  ({len(result.notes) - 10} more notes)")
    lines.append("  outputs: " + ", ".join(str(p) for p in result.outputs()))
    return "\n".join(lines)


def _source(config: dict[str, Any]) -> str:
    return " (from the run's config)" if config.get("estimator_from") == "the run's config" else ""


def _question_lines(result: ScanResult, shown: int) -> list[str]:
    tally = result.questions
    if not tally.records:
        return ["  questions: not recorded (no prompt or question column)"]
    counts = tally.counts()
    lines = [f"  questions: {counts['questions']:,} seen; {counts['stuck']} stuck (always the lowest reward), "
             f"{counts['saturated']} saturated (always the highest), {counts['constant']} constant otherwise "
             f"(each over >= {tally.min_groups} groups)"]
    for f in tally.flagged()[:shown]:
        lines.append(f"    {f.kind:9} {f.text!r}  ({f.groups} groups, reward {f.reward:.4g}, "
                     f"steps {f.first_step}..{f.last_step})")
    return lines


def _violation_lines(result: ScanResult) -> list[str]:
    logs = result.violations.by_invariant
    if not logs:
        return ["  violations: none"]
    lines = [f"  violations: {plural(len(logs), 'invariant')} broken, {result.violations.errors} with error severity"]
    for log in logs.values():
        severity = "error" if log.error else "warning"
        lines.append(f"    {log.invariant} ({severity}): from step {log.first_step}, {plural(log.steps, 'step')}: "
                     f"{log.range_text()}")
        lines.append(f"      first: {plain(log.message)[:300]}")
    return lines
