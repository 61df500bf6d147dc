"""What crosses step boundaries, and the one place it changes: :meth:`RunState.update`.

The per-question history, the run totals of the retry ledger, the violation counts and
the convention lock are the monitor's only memory between steps. ``update`` folds a
finished step in (once per step, at its end, a failing step included) and returns the
metrics that memory yields; ``lock_convention`` is called by the rollout check. Both
are explicit calls in :class:`~grpo_monitor.monitor.GRPOMonitor`; nothing else mutates
this state, and :meth:`state_dict` saves all of it.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from .accumulator import HostGroups
from .config import MonitorConfig
from .estimators.judge import EstimatorJudge, Judgement
from .history import _FIELDS as RECORD_FIELDS
from .inputs import InputTypeError, InputValueError, plain_state
from .questions import QuestionTracker
from .violations import INVARIANTS

_TOTALS = ("generated_groups", "generated_responses", "retained_groups")


# ------------------------------------------------------------ the saved state, validated
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

    @field_validator("candidates", "replayed")
    @classmethod
    def _known(cls, names: list[str] | None) -> list[str] | None:
        from .estimators.registry import ESTIMATORS

        unknown = [n for n in names or () if n not in ESTIMATORS]
        if unknown:
            raise ValueError(f"unknown estimator(s) {unknown}")
        return names


class SavedConfig(_Strict):
    """What the state was recorded under: a state from another group size or estimator is refused by default."""

    group_size: int | None = None
    std_convention: str = "auto"
    stabilizer: float | None = None


class MonitorState(_Strict):
    """The whole of ``GRPOMonitor.state_dict()``; ``load_state_dict`` validates against it before any change."""

    step: Count
    config: SavedConfig | None = None  # absent in states saved before 0.3
    conventions: ConventionState
    questions: HistoryState
    counts: dict[str, Count] = Field(default_factory=dict)
    totals: dict[Literal["generated_groups", "generated_responses", "retained_groups"], Amount] = Field(
        default_factory=dict)

    @field_validator("counts")
    @classmethod
    def _invariants(cls, counts: dict[str, int]) -> dict[str, int]:
        unknown = sorted(set(counts) - set(INVARIANTS))
        if unknown:
            raise ValueError(f"unknown invariant(s) {unknown}")
        return counts

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
        ("std_convention", saved.config.std_convention, config.std_convention, "auto"),
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


@dataclasses.dataclass(frozen=True)
class RunUpdate:
    """What the run state yields for one step: metrics, stuck questions, the per-question table (or None)."""

    metrics: dict[str, float]
    flagged: tuple[Hashable, ...] = ()
    table: list[dict[str, Any]] | None = None


class RunState:
    """The monitor's memory between steps (see module docstring)."""

    def __init__(self, config: MonitorConfig):
        self.config = config
        self.questions = QuestionTracker(config)
        self.estimator = EstimatorJudge(config)
        self.totals: dict[str, float] = {}  # _TOTALS summed over the run (absent: 0)
        self.counts: Counter[str] = Counter()

    def judge_estimator(self, rollout: dict[str, float], records: Sequence[Any],
                        breached: frozenset[str] = frozenset()) -> Judgement | None:
        """Name the estimator of a checked rollout slice and narrow the lock across steps."""
        return self.estimator.judge(rollout, records, breached)

    def redeclare(self, config: MonitorConfig) -> None:
        """A newly declared estimator: a fresh lock, the rest of the memory kept."""
        self.config = config
        self.estimator = EstimatorJudge(config)

    def count(self, violations: Sequence[Any]) -> None:
        for v in violations:
            self.counts[v.invariant] += 1

    def update(self, step: int, rollout: dict[str, float] | None, ledger: dict[str, float] | None,
               groups: HostGroups | None) -> RunUpdate:
        """Fold one finished step in: ledger totals and the per-question history."""
        metrics = self._fold_totals(rollout, ledger)
        if groups is None or not (groups.kept or groups.generated or len(groups.adv)):
            return RunUpdate(metrics)
        binary = (rollout or {}).get("nonbinary", 0) == 0 and (ledger or {}).get("generated_nonbinary", 0) == 0
        metrics.update(self.questions.update(step, groups.kept, groups.generated, binary))
        table = None
        if step % self.config.table_every == 0 and len(self.questions.history):
            table = self.questions.table(self.config.table_rows)
        return RunUpdate(metrics, tuple(self.questions.flagged()), table)

    def _fold_totals(self, rollout: dict[str, float] | None, ledger: dict[str, float] | None) -> dict[str, float]:
        if ledger is not None:
            self._add_total("generated_groups", ledger["generated_groups"])
            self._add_total("generated_responses", ledger["generated_responses"])
        if rollout is not None:
            self._add_total("retained_groups", rollout["groups"])
        if self.totals.get("generated_groups", 0) <= 0:
            return {}
        return {f"grpo/sampling/total_{k}": float(self.totals.get(k, 0)) for k in _TOTALS}

    def _add_total(self, key: str, value: float) -> None:
        self.totals[key] = self.totals.get(key, 0) + value

    def state_dict(self) -> dict[str, Any]:
        """Plain Python values only (numpy/torch ids converted): JSON and ``weights_only`` friendly."""
        cfg = self.config
        return plain_state({
            "config": {"group_size": cfg.group_size, "std_convention": cfg.std_convention,
                       "stabilizer": cfg.stabilizer},
            "conventions": self.estimator.state_dict(),
            "questions": self.questions.state_dict(),
            "counts": dict(self.counts),
            "totals": dict(self.totals),
        })

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (validated first by :func:`validate_state`, so nothing here can fail
        half-way). The history keeps this config's limits: ``history_cap`` (the newest questions kept),
        ``stuck_after``, ``success_halflife``. A state of another estimator leaves the lock fresh."""
        saved = state.get("config") or {}
        if saved.get("std_convention", self.config.std_convention) == self.config.std_convention:
            self.estimator.load_state_dict(state["conventions"])
        questions = dict(state["questions"])
        cfg = self.config
        questions.update(cap=cfg.history_cap, stuck_after=cfg.stuck_after, halflife=cfg.success_halflife,
                         questions=list(questions["questions"])[-cfg.history_cap:])
        self.questions.load_state_dict(questions)
        self.counts = Counter(state.get("counts", {}))
        self.totals = dict(state.get("totals", {}))
