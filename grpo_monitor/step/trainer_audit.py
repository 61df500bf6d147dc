"""The trainer's own logged numbers against the monitor's exact values of the same step (``trainer_metric``).

An integration (or user code) hands the monitor what the trainer logs for the step, with the exact
values it recomputed from the same tensors (``GRPOMonitor.audit_trainer_metrics``); keys whose exact
counterpart is a monitor metric (:data:`~grpo_monitor.catalog.trainer_keys.TRAINER_KEYS`'s
``quantity``) are read from the step's own report. A gap beyond the key's tolerance is a
``trainer_metric`` *warning* naming the key, both values and the likely cause; never an error.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..catalog.trainer_keys import CAUSES, TRAINER_KEYS, TrainerKey, trainer_key
from ..violations import Violation
from .guard import locked
from .inputs.tensors import InputTypeError, InputValueError

MISMATCHED_KEY = "grpo/trainer_metrics/mismatched"


@dataclasses.dataclass(frozen=True)
class AuditContext:
    """What the cause test needs: ranks, accumulation steps, micro-batches per optimizer window of the log."""

    world_size: int = 1
    accumulation_steps: int = 1
    windows: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class AuditRequest:
    """One framework's logged values of a step, the exact values given with them, and the context."""

    framework: str
    logged: dict[str, float]
    exact: dict[str, float]
    context: AuditContext
    of_step: int | None = None  # the step the values belong to, when its report has gone out (verl's data metrics)


@dataclasses.dataclass(frozen=True)
class AuditRow:
    """One key at one step: the trainer's value, the exact one, the tolerance, the cause when they disagree."""

    framework: str
    key: str
    trainer: float
    exact: float
    tolerance: float
    cause: str | None  # a name of CAUSES when mismatched, else None
    of_step: int | None = None  # the step the values belong to when it is not the report's

    @property
    def mismatched(self) -> bool:
        return self.cause is not None

    def to_dict(self) -> dict[str, Any]:
        """The fields by name (all scalars: what ``dataclasses.asdict`` gives, without its deep copy)."""
        return {f.name: getattr(self, f.name) for f in _ROW_FIELDS}


_ROW_FIELDS = dataclasses.fields(AuditRow)


def audit_request(framework: Any, logged: Any, exact: Any, world_size: Any, accumulation_steps: Any,
                  windows: Any, of_step: Any = None) -> AuditRequest:
    """The boundary of ``audit_trainer_metrics``: worded errors naming the argument."""
    if not isinstance(framework, str):
        raise InputTypeError(f"framework must be a string, but got {type(framework).__name__}")
    for name, values in (("logged", logged), ("exact", exact if exact is not None else {})):
        if not isinstance(values, Mapping):
            raise InputTypeError(f"{name} must be a dict of trainer key -> number, but got {type(values).__name__}")
        for key in values:
            try:
                trainer_key(framework, key)
            except KeyError as exc:
                raise InputValueError(f"{name}[{key!r}]: {exc.args[0]}") from None
    counts = {"world_size": world_size, "accumulation_steps": accumulation_steps}
    for name, n in counts.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InputValueError(f"{name} must be an int >= 1, but got {n!r}")
    if not all(isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in windows):
        raise InputValueError(f"windows must be micro-batch counts >= 1, but got {windows!r}")
    if of_step is not None and (isinstance(of_step, bool) or not isinstance(of_step, int) or of_step < 0):
        raise InputValueError(f"of_step must be None or an int >= 0, but got {of_step!r}")
    return AuditRequest(framework, _numbers(logged), _numbers(exact or {}),
                        AuditContext(world_size, accumulation_steps, tuple(windows)), of_step)


def _numbers(values: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of ``values`` (a trainer's NaN for an empty batch is no measurement)."""
    out = {}
    for key, value in values.items():
        if isinstance(value, bool):
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise InputTypeError(f"the value of {key!r} must be a number, but got {type(value).__name__}") from None
        if math.isfinite(number):
            out[key] = number
    return out


def audit_rows(requests: Sequence[AuditRequest], metrics: Mapping[str, float]) -> list[AuditRow]:
    """Every logged key with an exact value (given, or the step's monitor metric ``quantity``), compared."""
    rows = []
    for req in requests:
        for key, trainer in req.logged.items():
            record = TRAINER_KEYS[(req.framework, key)]
            exact = req.exact.get(key, metrics.get(record.quantity) if req.of_step is None else None)
            if exact is None or not math.isfinite(exact):
                continue
            tol = record.tolerance(exact)
            cause = diagnose(record, trainer, exact, req.context) if abs(trainer - exact) > tol else None
            rows.append(AuditRow(req.framework, key, trainer, float(exact), tol, cause, req.of_step))
    return rows


def diagnose(record: TrainerKey, trainer: float, exact: float, ctx: AuditContext) -> str:
    """The likely cause of a gap: a factor the context explains first, then the key's own causes in order.

    >>> r = TRAINER_KEYS[("verl", "actor/entropy_loss")]
    >>> diagnose(r, 3.98, 1.99, AuditContext(world_size=2))
    'dp_sum'
    """
    ratio = trainer / exact if exact else math.inf
    if ctx.world_size > 1 and _near(ratio, ctx.world_size):
        return "dp_sum"
    k = ctx.accumulation_steps
    if k > 1 and (_near(ratio, k) or _near(ratio, 1 / k)):
        return "accumulation_scaling"
    for cause in record.causes:
        if _applies(cause, record, trainer, exact, ctx):
            return cause
    return record.causes[-1]


def _near(ratio: float, factor: float) -> bool:
    return math.isfinite(ratio) and abs(ratio - factor) <= 1e-3 * factor


def _applies(cause: str, record: TrainerKey, trainer: float, exact: float, ctx: AuditContext) -> bool:
    if cause == "float32_zero_std":  # float32 stds of constant groups are not 0: TRL counts fewer groups
        return trainer < exact
    if cause == "per_rank_means":
        return ctx.world_size > 1
    if cause == "micro_batch_averaging":
        return len(set(ctx.windows)) > 1 or ctx.accumulation_steps > 1
    if cause == "missed_cap":
        return trainer < exact
    return cause in ("accumulation_scaling", "dp_sum", "off_by_one", "definition")


def findings(rows: Sequence[AuditRow], step: int) -> list[Violation]:
    """One ``trainer_metric`` warning per mismatched row (the catalogued hint is the cause's text)."""
    from ..invariants import INVARIANTS

    inv = INVARIANTS["trainer_metric"]
    return [Violation("trainer_metric", step, f"{_at(r)}{r.framework} logged {r.key} = {r.trainer:.6g}, exact value "
                      f"{r.exact:.6g} (|gap| {abs(r.trainer - r.exact):.3g} > tolerance {r.tolerance:.3g})",
                      inv.expected(None), (), CAUSES[r.cause or "definition"], severity=inv.severity)
            for r in rows if r.mismatched]


def _at(row: AuditRow) -> str:
    return "" if row.of_step is None else f"at step {row.of_step}, "


def audit_metrics(rows: Sequence[AuditRow]) -> dict[str, float]:
    """``grpo/trainer_metrics/mismatched``: the keys whose trainer value is off this step ({} when none audited)."""
    return {MISMATCHED_KEY: float(sum(r.mismatched for r in rows))} if rows else {}


class TrainerAudit:
    """The audit requests of the current step, applied once to its report (``GRPOMonitor._report``)."""

    def __init__(self) -> None:
        self.requests: list[AuditRequest] = []

    def add(self, request: AuditRequest) -> None:
        self.requests.append(request)

    def apply(self, report: Any, violations: Sequence[Violation]) -> list[Violation]:
        """Compare, put the rows, the count and the findings in ``report``; return the findings to record."""
        from .metrics import violation_metrics

        rows = audit_rows(self.requests, report.metrics)
        if not rows:
            return []
        found = findings(rows, report.step)
        report.violations = [*violations, *found]
        report.metrics.update(violation_metrics(report.violations))
        report.metrics.update(audit_metrics(rows))
        report.trainer_metrics = [r.to_dict() for r in rows]
        return found


class AuditsTrainerMetrics:
    """``GRPOMonitor.audit_trainer_metrics`` (the monitor holds the step's :class:`TrainerAudit` as ``_audit``)."""

    _audit: TrainerAudit

    @locked
    def audit_trainer_metrics(self, framework: str, logged: dict[str, float], exact: dict[str, float] | None = None,
                              *, world_size: int = 1, accumulation_steps: int = 1, windows: tuple = (),
                              of_step: int | None = None) -> None:
        """What the trainer logs for this step (``logged``, its keys as ``framework`` names them), compared at
        ``end_step`` with ``exact`` or the monitor's own value (:mod:`grpo_monitor.catalog.trainer_keys`): a gap
        beyond the key's tolerance is a ``trainer_metric`` warning naming the likely cause. ``of_step``: the step
        the values belong to when its report has gone out (then only ``exact`` is compared)."""
        self._audit.add(audit_request(framework, logged, exact, world_size, accumulation_steps, windows, of_step))
