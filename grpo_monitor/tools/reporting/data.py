"""A run's JSONL log as arrays: one row per step, NaN where a metric is absent.

The log is the JSONL sink's output (one ``StepReport.to_dict()`` per line, each checked
by :mod:`.records`). A demo run also holds ``theory.jsonl``: what the policy's own success
probabilities predict per step, and those probabilities group by group.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from ...files.reading import loads, read_input
from .notes import REGISTERED
from .records import read_step_records

#: File names looked for in a run folder, in order.
LOG_NAMES = ("monitor.jsonl", "grpo_monitor.jsonl", "metrics.jsonl")
THEORY_NAME = "theory.jsonl"
META_NAME = "run.json"
#: The largest group size a report takes from a run's files: beyond any GRPO run, and it keeps the figures' work
#: per G (the two-valued std check, the iid predictions) small when a run.json or a run record is damaged.
MAX_GROUP_SIZE = 1 << 14


def declared_group_size(value: Any) -> int | None:
    """``value`` when it is a group size a report can use (an int from 2 to :data:`MAX_GROUP_SIZE`), else None.

    >>> declared_group_size(8), declared_group_size(True), declared_group_size(10 ** 22)
    (8, None, None)
    """
    ok = isinstance(value, int) and not isinstance(value, bool) and 2 <= value <= MAX_GROUP_SIZE
    return value if ok else None


@dataclasses.dataclass
class ViolationMark:
    """One violation on the time axis."""

    step: int
    invariant: str
    message: str
    failed: bool
    repro_path: str | None
    severity: str = "error"  # "warning": logged and counted, never stops the run


@dataclasses.dataclass
class RunData:
    """Per-step arrays of a run (``steps`` sorted; a repeated step keeps its last record)."""

    path: Path
    steps: np.ndarray
    metrics: dict[str, np.ndarray]
    histograms: dict[str, list[list[float] | None]]
    violations: list[ViolationMark]
    estimators: list[str | None]
    theory: dict[str, np.ndarray]
    failed_step: int | None
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Per-group columns of ``theory.jsonl`` (``trained_p``, ``generated_p``) by step; None where absent.
    theory_groups: dict[str, list[list[float] | None]] = dataclasses.field(default_factory=dict)
    #: The run record (``StepReport.run``: integration, settings, config), the log's last; {} in older logs.
    run: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: What the report did with a log whose steps go back (a resume into the same log, two writers); '' when none.
    segments_note: str = ""
    #: The trainer's own logged values against the exact ones (``StepReport.trainer_metrics``), with their step.
    trainer_metrics: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: The live run's ``health`` record per step (``HealthUpdate.to_dict()``); {} in logs before run health.
    health: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def series(self, key: str) -> np.ndarray | None:
        """The metric's values per step, or None when it never appears."""
        return self.metrics.get(key)

    def has(self, key: str) -> bool:
        values = self.metrics.get(key)
        return values is not None and bool(np.isfinite(values).any())

    @property
    def integration(self) -> str:
        """Where the run came from: ``"trl"``, ``"verl"``, ... (the run record), ``"scan"``, or ``"api"``.

        A log without a run record (older writers) is placed by its declared estimator's
        framework prefix (``trl.group``) or its integration keys (``grpo/trl/...``).
        """
        name = self.run.get("integration")
        if isinstance(name, str) and name:
            return name
        if "scanned" in self.meta:
            return "scan"
        for prefix in REGISTERED:
            if (self.estimator or "").startswith(prefix + ".") or any(k.split("/")[:2] == ["grpo", prefix]
                                                                       for k in self.metrics):
                return prefix
        return "api"

    @property
    def settings(self) -> dict[str, Any]:
        """The integration's trainer settings from the run record ({} when none)."""
        settings = self.run.get("settings")
        return settings if isinstance(settings, dict) else {}

    @property
    def config(self) -> dict[str, Any]:
        """The monitor's configuration from the run record ({} when none)."""
        config = self.run.get("config")
        return config if isinstance(config, dict) else {}

    @property
    def estimator(self) -> str | None:
        """The last estimator the monitor reported."""
        return next((c for c in reversed(self.estimators) if c), None)


def find_log(run: str | os.PathLike) -> Path:
    """The JSONL log of ``run`` (a folder or the file itself), or a worded FileNotFoundError."""
    path = Path(run)
    if path.is_file():
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"run {str(path)!r} is neither a folder nor a JSONL file")
    for name in LOG_NAMES:
        if (path / name).is_file():
            return path / name
    logs = sorted(p for p in path.glob("*.jsonl") if p.name != THEORY_NAME)
    if len(logs) == 1:
        return logs[0]
    found = [p.name for p in logs] or "none"
    raise FileNotFoundError(
        f"run folder {str(path)!r} has no monitor log: expected one of {list(LOG_NAMES)} or a single *.jsonl "
        f"(found {found}); pass the JSONL file itself"
    )


def load_run(run: str | os.PathLike) -> RunData:
    """Read the log (and ``theory.jsonl`` next to it, when present) into :class:`RunData`.

    A line that is not a step record raises :class:`~.records.LogFormatError` (a ValueError)
    naming the file and the line.
    """
    log = find_log(run)
    lines = read_step_records(log)
    run_record: dict[str, Any] = next((r["run"] for r in reversed(lines) if isinstance(r.get("run"), dict)), {})
    records = _by_step(lines)
    if not records:
        raise ValueError(f"{log} holds no step records; expected one StepReport.to_dict() per line")
    steps = np.array(sorted(records), dtype=np.int64)
    keys = sorted({k for r in records.values() for k in r.get("metrics", {})})
    metrics = {k: np.array([_num(records[s].get("metrics", {}).get(k)) for s in steps]) for k in keys}
    hist_keys = sorted({k for r in records.values() for k in (r.get("histograms") or {})})
    histograms = {k: [(records[s].get("histograms") or {}).get(k) for s in steps] for k in hist_keys}
    marks = sorted((_mark(v, r["step"], bool(r.get("failed"))) for r in lines for v in r.get("violations") or []),
                   key=lambda m: m.step)  # every record's: a step written again keeps its earlier breach
    failed = [r["step"] for r in lines if r.get("failed")]
    theory, theory_groups = _theory(log.parent / THEORY_NAME, steps)
    return RunData(
        path=log, steps=steps, metrics=metrics, histograms=histograms, violations=marks,
        estimators=[records[s].get("estimator", records[s].get("convention")) for s in steps], theory=theory,
        failed_step=failed[0] if failed else None, meta=_meta(log.parent / META_NAME), theory_groups=theory_groups,
        run=run_record, segments_note=_segments_note(lines),
        trainer_metrics=[{**row, "step": int(s) if row.get("of_step") is None else row["of_step"]}
                         for s in steps for row in records[s].get("trainer_metrics") or [] if isinstance(row, dict)],
        health={int(s): r["health"] for s, r in records.items() if isinstance(r.get("health"), dict)},
    )


def _segments_note(lines: list[dict[str, Any]]) -> str:
    """:func:`.segments.segments_note` of the log's records: the steps written more than once, and the violations
    of records a later record of the same step replaced in the figures."""
    from .segments import find_segments, segments_note

    segments = find_segments(lines)
    if len(segments) < 2:
        return ""
    last = {r["step"]: i for i, r in enumerate(lines) if "failed" in r or "violations" in r}
    counts: dict[int, int] = {}
    for r in lines:
        if "failed" in r or "violations" in r:
            counts[r["step"]] = counts.get(r["step"], 0) + 1
    earlier = sum(len(r.get("violations") or []) for i, r in enumerate(lines) if last.get(r["step"], i) != i)
    return segments_note(segments, sum(n > 1 for n in counts.values()), earlier)


def _by_step(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Checked records by step; a later record of a step adds its fields and metrics to the earlier one."""
    out: dict[int, dict[str, Any]] = {}
    for r in records:
        previous = out.get(r["step"], {})
        out[r["step"]] = {**previous, **r, "metrics": {**previous.get("metrics", {}), **r["metrics"]}}
    return out


def _num(value: Any) -> float:
    """``value`` as a float; NaN for anything else (an int past float range included)."""
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return math.nan


def _mark(v: dict[str, Any], step: int, failed: bool) -> ViolationMark:
    return ViolationMark(
        step=step if v.get("step") is None else v["step"], invariant=v["invariant"], message=v.get("message") or "",
        failed=failed, repro_path=v.get("repro_path"), severity=v.get("severity") or "error",
    )


def _meta(path: Path) -> dict[str, Any]:
    """The run's settings (``run.json``, written by the demo), or {}."""
    if not path.exists():
        return {}
    try:
        meta = loads(read_input(path), path)
    except (OSError, json.JSONDecodeError):  # an unreadable run.json only loses the settings it holds
        return {}
    return meta if isinstance(meta, dict) else {}


def _theory(path: Path, steps: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, list[list[float] | None]]]:
    """Scalar columns of ``theory.jsonl`` aligned with ``steps``, and its per-group lists (both empty when absent)."""
    if not path.is_file():
        return {}, {}
    rows = {}
    for number, line in enumerate(read_input(path).splitlines(), 1):
        try:
            row = loads(line, path, number)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            rows[row["step"]] = row
    keys = sorted({k for r in rows.values() for k, v in r.items() if isinstance(v, (int, float)) and k != "step"})
    scalars = {k: np.array([_num(rows.get(int(s), {}).get(k)) for s in steps]) for k in keys}
    lists = sorted({k for r in rows.values() for k, v in r.items() if isinstance(v, list)})
    groups = {k: [_numbers(rows.get(int(s), {}).get(k)) for s in steps] for k in lists}
    return scalars, groups


def _numbers(value: Any) -> list[float] | None:
    """A list of numbers as floats; None for anything else."""
    if not isinstance(value, list) or not all(isinstance(v, (int, float)) for v in value):
        return None
    return [_num(v) for v in value]
