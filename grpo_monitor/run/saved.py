"""The saved state of a monitor, validated as a whole before a resume changes anything.

:class:`MonitorState` is the pydantic model of ``GRPOMonitor.state_dict()``;
:func:`validate_state` checks a state against it (an ``InputValueError`` naming every bad
field) and :func:`check_config` refuses a state recorded under another declared group
size or estimator.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..config import MonitorConfig
from ..step.inputs import InputTypeError, InputValueError
from ..violations import INVARIANTS
from .history import _FIELDS as RECORD_FIELDS


def _number(value: Any) -> Any:
    """Numbers only: pydantic's lax mode would take ``"3"`` and ``True``."""
    if isinstance(value, (str, bytes, bool)):
        raise ValueError(f"expected a number, got {type(value).__name__} {value!r:.40}")
    return value


Count = Annotated[int, BeforeValidator(_number), Field(ge=0)]
Amount = Annotated[float, BeforeValidator(_number), Field(ge=0, allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RecordState(_Strict):
    """One question of the history, as ``QuestionHistory.state_dict`` lists it after the id."""

    times_seen: Count = 0
    times_filtered: Count = 0
    success_sum: Amount = 0.0
    response_count: Count = 0
    last_reward_std: Annotated[float, BeforeValidator(_number)] = math.nan  # NaN: not seen with 2+ scored rows
    stuck_streak: Count = 0
    last_step: Annotated[int, BeforeValidator(_number), Field(ge=-1)] = -1
    recent_success: Amount = 0.0
    recent_count: Amount = 0.0
    recent_groups: Amount = 0.0
    degenerate_low: Count = 0
    degenerate_high: Count = 0
    degenerate_other: Count = 0
    truncated_rows: Count = 0
    truncation_rows: Count = 0
    degenerate_truncated: Count = 0

    @field_validator("last_reward_std")
    @classmethod
    def _std(cls, value: float) -> float:
        if not (math.isnan(value) or 0 <= value < math.inf):
            raise ValueError(f"expected NaN or a finite number >= 0, got {value}")
        return value


class HistoryState(_Strict):
    cap: Annotated[int, BeforeValidator(_number), Field(ge=1)]
    stuck_after: Annotated[int, BeforeValidator(_number), Field(ge=1)]
    halflife: Annotated[float, BeforeValidator(_number), Field(gt=0, allow_inf_nan=False)] | None = None
    last_step: Count | None
    questions: list[list[Any]]
    binary: bool = True

    @field_validator("questions")
    @classmethod
    def _records(cls, rows: list[list[Any]]) -> list[list[Any]]:
        for i, row in enumerate(rows):
            if not 2 <= len(row) <= 1 + len(RECORD_FIELDS):
                raise ValueError(f"question record {i} has {len(row)} entries; expected the id and up to "
                                 f"{len(RECORD_FIELDS)} fields ({', '.join(RECORD_FIELDS)})")
            try:
                hash(_as_id(row[0]))
                RecordState(**dict(zip(RECORD_FIELDS, row[1:], strict=False)))
            except (TypeError, ValidationError) as exc:
                raise ValueError(f"question record {i} (id {row[0]!r:.40}): {_worded(exc)}") from None
        return rows


class ConventionState(_Strict):
    candidates: list[str] | None = None
    replayed: list[str] | None = None
    locked: str | None = None  # the name "auto" reported so far (a registry entry)

    @field_validator("locked")
    @classmethod
    def _known_locked(cls, name: str | None) -> str | None:
        from ..estimators.registry import ESTIMATORS

        if name is not None and name not in ESTIMATORS:
            raise ValueError(f"unknown estimator {name!r}")
        return name

    @field_validator("candidates", "replayed")
    @classmethod
    def _known(cls, names: list[str] | None) -> list[str] | None:
        from ..estimators.registry import ESTIMATORS

        unknown = [n for n in names or () if n not in ESTIMATORS]
        if unknown:
            raise ValueError(f"unknown estimator(s) {unknown}")
        return names


class SavedConfig(_Strict):
    """What the state was recorded under: a state from another group size or estimator is refused by default."""

    group_size: int | None = None
    estimator: str = "auto"
    stabilizer: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _older_name(cls, data: Any) -> Any:
        """A state saved before 0.4 names the estimator ``std_convention``."""
        if isinstance(data, dict) and "std_convention" in data:
            data = {("estimator" if k == "std_convention" else k): v for k, v in data.items()}
        return data


class MonitorState(_Strict):
    """The whole of ``GRPOMonitor.state_dict()``; ``load_state_dict`` validates against it before any change."""

    step: Count
    config: SavedConfig | None = None  # absent in states saved before 0.3
    conventions: ConventionState
    questions: HistoryState
    counts: dict[str, Count] = Field(default_factory=dict)
    totals: dict[Literal["generated_groups", "generated_responses", "retained_groups"], Amount] = Field(
        default_factory=dict)
    health: dict[str, Any] | None = None  # HealthTracker.state_dict() (absent in states saved before run health)

    @field_validator("counts")
    @classmethod
    def _invariants(cls, counts: dict[str, int]) -> dict[str, int]:
        unknown = sorted(set(counts) - set(INVARIANTS))
        if unknown:
            raise ValueError(f"unknown invariant(s) {unknown}")
        return counts

    @field_validator("health")
    @classmethod
    def _health_state(cls, state: dict[str, Any] | None) -> dict[str, Any] | None:
        if state is not None:
            from ..health.tracker import HealthTracker

            HealthTracker(None).load_state_dict(state)  # raises ValueError naming what is wrong
        return state

    @model_validator(mode="after")
    def _history_before_step(self) -> MonitorState:
        last = self.questions.last_step
        if last is not None and last >= self.step:
            raise ValueError(f"questions.last_step is {last} but step is {self.step}: the history cannot be ahead "
                             "of the step counter")
        return self


def validate_state(state: Any) -> MonitorState:
    """``state`` checked as a whole: :class:`InputValueError` naming every bad field, nothing changed."""
    if not isinstance(state, dict):
        raise InputTypeError(f"state must be the dict GRPOMonitor.state_dict() returned, but got "
                             f"{type(state).__name__}")
    try:
        return MonitorState.model_validate(state)
    except ValidationError as exc:
        raise InputValueError(f"the monitor state to load is invalid, nothing was changed: {_worded(exc)}") from None


def check_config(saved: MonitorState, config: MonitorConfig, allow_config_change: bool) -> None:
    """Refuse a state recorded under another declared group size or estimator (``"auto"``/None never conflict)."""
    if saved.config is None or allow_config_change:
        return
    clashes = [f"{name}={old!r} (this monitor: {new!r})" for name, old, new, unset in (
        ("group_size", saved.config.group_size, config.group_size, None),
        ("estimator", saved.config.estimator, config.estimator, "auto"),
    ) if old != new and unset not in (old, new)]
    if clashes:
        raise InputValueError(f"the monitor state was saved by a run with {' and '.join(clashes)}; nothing was "
                              "changed. Load it with the run's own config, or pass allow_config_change=True to "
                              "load it anyway (a changed estimator restarts the estimator lock)")


def _worded(exc: Exception) -> str:
    if not isinstance(exc, ValidationError):
        return str(exc)
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'state'}: {e['msg']} (got {e.get('input')!r:.60})"
                     for e in exc.errors())


def _as_id(value: Any) -> Any:
    return tuple(_as_id(v) for v in value) if isinstance(value, list) else value
