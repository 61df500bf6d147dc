"""Configuration: one pydantic model, validated at construction, its fields grouped in sections.

The fields stay flat (``cfg.history_cap``; ``model_dump()`` is the flat form every saved state,
repro file, tracker and ``GRPO_MONITOR_CONFIG`` holds) and read grouped too
(``cfg.history.history_cap``, ``MonitorConfig(history={...})``): :mod:`.sections`. Older names
(``std_convention``, two tolerances) keep working with one warning: :mod:`.aliases`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..errors import unknown_keywords
from ..estimators.base import Estimator
from ..estimators.custom import CUSTOM, custom
from ..estimators.registry import known, unknown_estimator
from ..stats.aggregations import known_names
from ..violations import INVARIANTS
from .aliases import CONFIG_ALIASES, renamed, warn_renamed
from .sections import SECTIONS, Section, flatten_sections, grouped
from .tolerances import Tolerances

__all__ = ["SECTIONS", "MonitorConfig", "Policy", "Section", "Tolerances"]

Policy = Literal["raise", "warn", "ignore"]


def _known(name: str) -> bool:
    return name == "auto" or known(name)


class MonitorConfig(BaseModel):
    """What the monitor expects of the run, and what it does on a breach.

    >>> MonitorConfig(group_size=8, estimator="population").group_size
    8

    ``estimator`` names the advantage function; ``std_convention``, its 0.1 name, still works
    (constructor keyword and attribute) with one ``DeprecationWarning``. Each field belongs to one
    section (:data:`SECTIONS`), read as ``cfg.<section>.<field>`` or given as ``<section>={...}``:

    >>> MonitorConfig(advantages={"estimator": "verl.grpo"}).advantages.estimator
    'verl.grpo'
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    group_size: int | None = Field(None, ge=2, description="responses per prompt, when fixed")
    estimator: str = Field(
        "auto", description="the advantage estimator the trainer uses: a name of grpo_monitor.ESTIMATORS "
        "(population, bessel, none, leave_one_out, batch, trl.group, verl.grpo, nemo_rl.grpo, ...), 'auto', "
        "or your own: a function rewards (B, G) -> advantages (B, G) (declared with "
        "grpo_monitor.estimators.custom, kept here by its name) or the name it was declared under",
    )
    stabilizer: float | None = Field(None, ge=0, description="the declared epsilon added to the std; None: inferred")
    on_violation: Policy = Field(
        "raise", description="what a breach does: 'raise' InvariantViolation before the optimizer uses the batch, "
        "'warn', or 'ignore' (counted in grpo/invariants/* only)")
    policies: dict[str, Policy] = Field(default_factory=dict, description="per-invariant policy overrides")
    tolerances: Tolerances = Field(default_factory=Tolerances)
    outcome_rewards: bool = Field(True, description="one reward per response: token advantages constant per row")
    expect_on_policy: bool = Field(
        False, description="logprobs must match old_logprobs up to numerical noise (first inner epoch; the "
        "mismatch_k3 rule, trainer against trainer)")
    on_policy_bitwise: bool = Field(
        False, description="with expect_on_policy: logprobs equal old_logprobs to tolerances.on_policy (max |diff|), "
        "for trainers whose two passes are bitwise identical")
    mismatch_ratio_low: float = Field(0.5, gt=0, lt=1, description="lower end of the importance-weight band "
                                      "(grpo/mismatch/outside_frac), as truncated/masked importance sampling uses")
    mismatch_ratio_high: float = Field(2.0, gt=1, description="upper end of the importance-weight band")
    mismatch_mask: Literal["token", "sequence"] | None = Field(
        None, description="the importance-sampling mask the trainer applies with that band (TRL's "
        "vllm_importance_sampling_mode token_mask / sequence_mask): grpo/mismatch/masked_frac and masked_ess")
    max_policy_lag: int = Field(
        0, ge=0, description="optimizer steps the sampler may lag the trainer by design (asynchronous trainers: "
        "AReaL, prime-rl, TRL's async GRPO); above 0 a large mismatch KL is not an error")
    entropy_low_threshold: float = Field(
        0.01, ge=0, description="per-token entropy (nats) below which a token counts in grpo/entropy/low_frac")
    max_response_length: int | None = Field(
        None, ge=1, description="the trainer's response-length limit: rows whose length reaches it are truncated "
        "(when observe_rollout gets lengths but no truncated=)")
    clip_range: tuple[float, float] = Field(
        (0.2, 0.2), description="PPO clip (low, high): ratio outside [1-low, 1+high]"
    )
    kl_clamp: tuple[float, float] | None = Field((-10.0, 10.0), description="bounds the trainer clamps its KL to")
    rollout_scope: Literal["local", "global"] = Field(
        "local", description="'local': each rank observes its own share of the rollout (summed across ranks); "
        "'global': every rank holds the whole gathered rollout (counted once)")
    defer_checks: bool = Field(
        False, description="check rollouts at end_step (one host sync per step) instead of at once"
    )
    repro_dir: str | None = Field(None, description="where offending tensors are saved; None: a temp folder")
    history_cap: int = Field(10_000, ge=1, description="questions kept in the per-question history")
    success_halflife: float | None = Field(
        10.0, gt=0, description="steps over which a question's pooled success rate halves its weight "
        "(the iid-predicted degenerate rate follows a learning policy); None: pool over the whole run",
    )
    stuck_after: int = Field(
        5, ge=1, description="steps a question may be filtered in every attempt before it is flagged"
    )
    table_every: int = Field(10, ge=1, description="steps between per-question tables handed to the sinks")
    table_rows: int = Field(200, ge=1, description="rows of the per-question table")
    sink_queue_size: int = Field(
        100, ge=1, description="reports queued per background sink before new ones are dropped"
    )
    sink_stall_timeout: float = Field(
        30.0, gt=0, description="seconds one sink call may run before the sink counts as blocked"
    )
    sink_when_full: Literal["drop", "block"] = Field(
        "drop", description="what a background sink's full queue does to a new report: 'drop' it (counted in "
        "grpo/monitor/dropped_reports, warned) so training never waits, or 'block' until there is room "
        "(backpressure, for offline runs such as the demo and scan; a sink hung past sink_stall_timeout still drops)"
    )
    sink_flush_timeout: float = Field(
        20.0, gt=0, description="seconds close() waits in all for background sinks to drain"
    )
    loss_aggregation: str = Field(
        "auto", description="how the loss aggregates token terms: 'auto' (fitted, not checked), token_mean, "
        "seq_mean_token_mean, seq_mean_token_sum, seq_mean_token_sum_norm, constant_normalizer, token_sum, or a "
        "trainer's name (trl.grpo, trl.dapo, ..., verl's token-mean, seq-mean-token-mean, ...)",
    )
    loss_scope: Literal["auto", "micro_batch", "step"] = Field(
        "auto", description="whether the loss's denominator counts the micro-batch (divided by the micro-batches "
        "of the step) or the whole optimizer step; 'auto': the alias's, else either",
    )
    loss_normalizer: float | None = Field(
        None, gt=0, description="T of constant_normalizer (tokens per response, e.g. max_completion_length); "
        "None: fitted",
    )
    halt_on: tuple[str, ...] = Field(
        (), description="run-health findings that stop the run with RunStalled once open (held for their "
        "patience): finding names (grpo_monitor.health.FINDINGS) or severities ('degraded', 'stalled': that "
        "severity or worse); empty (the default): a finding never stops training")
    gpu_hour_cost: float | None = Field(
        None, ge=0, description="cost of one accelerator-hour (any currency): degenerate_dominated then says "
        "what its wasted generation cost, for all the run's processes together")
    entropy_floor: float = Field(
        0.05, ge=0, description="mean token entropy (nats) entropy_collapse counts the steps to")
    strict: bool = Field(False, description="re-raise the monitor's own faults (for tests) instead of failing open")

    def __init__(self, **data: Any) -> None:
        # a misspelt field or estimator is one line naming the closest names, not pydantic's report of every name
        names = [*type(self).model_fields, *CONFIG_ALIASES, *SECTIONS]
        unknown = [key for key in data if key not in names]
        if unknown:
            raise unknown_keywords("MonitorConfig", unknown, [*type(self).model_fields])
        section = data.get("advantages")
        for argument, name in (("estimator", data.get("estimator")), ("std_convention", data.get("std_convention")),
                               ("advantages", section.get("estimator") if isinstance(section, dict) else None)):
            if isinstance(name, str) and not _known(name):
                raise unknown_estimator(name, f"MonitorConfig({argument}=)")
        super().__init__(**data)

    @model_validator(mode="before")
    @classmethod
    def _flat_current_names(cls, data: Any) -> Any:
        """Sections spread into flat fields; ``std_convention=`` sets ``estimator`` (one warning)."""
        if not isinstance(data, dict):
            return data
        return renamed("MonitorConfig", flatten_sections(data), CONFIG_ALIASES)

    @property
    def std_convention(self) -> str:
        """Deprecated: :attr:`estimator` under its 0.1 name."""
        warn_renamed("MonitorConfig", "std_convention", "estimator")
        return self.estimator

    def __getattr__(self, name: str) -> Any:
        """``cfg.<section>``: a read-only view of that section's fields (:class:`Section`)."""
        if name in SECTIONS:
            return Section(name, {f: getattr(self, f) for f in SECTIONS[name]})
        return super().__getattr__(name)  # type: ignore[misc]

    def grouped(self, mode: Literal["python", "json"] = "python") -> dict[str, dict[str, Any]]:
        """The fields nested by section (``MonitorConfig(**cfg.grouped())`` is ``cfg`` again); sections:
        advantages, checks, loss, sampler, history, health, delivery, tolerances."""
        return grouped(self.model_dump(mode=mode))

    @field_validator("policies")
    @classmethod
    def _known_invariants(cls, value: dict[str, Policy]) -> dict[str, Policy]:
        unknown = sorted(set(value) - set(INVARIANTS))
        if unknown:
            raise ValueError(f"unknown invariant(s) {unknown}; expected names from {sorted(INVARIANTS)}")
        return value

    @field_validator("estimator", mode="before")
    @classmethod
    def _estimator_name(cls, value: Any) -> Any:
        """A function or an Estimator record becomes its name (a function is declared with ``custom``)."""
        if isinstance(value, Estimator):
            if value.name not in CUSTOM and value.id is not None and value.id < 0:
                CUSTOM[value.name] = value
            return value.name
        if callable(value):
            return custom(value).name
        return value

    @field_validator("estimator")
    @classmethod
    def _known_estimator(cls, value: str) -> str:
        if not _known(value):
            raise unknown_estimator(value, "estimator")
        return value

    @field_validator("loss_aggregation")
    @classmethod
    def _known_aggregation(cls, value: str) -> str:
        if value not in known_names():
            raise ValueError(f"unknown loss aggregation {value!r}; expected one of {known_names()}")
        return value

    @field_validator("halt_on", mode="before")
    @classmethod
    def _known_findings(cls, value: Any) -> Any:
        from ..catalog.findings import FINDINGS, SEVERITIES

        names = (value,) if isinstance(value, str) else value
        unknown = sorted(str(v) for v in names if v not in FINDINGS and v not in SEVERITIES)
        if unknown:
            raise ValueError(f"unknown finding(s) or severit(ies) {unknown}; expected names from "
                             f"{sorted(FINDINGS)} or severities {list(SEVERITIES)}")
        return tuple(names)

    @field_validator("clip_range")
    @classmethod
    def _positive_clip(cls, value: tuple[float, float]) -> tuple[float, float]:
        if min(value) < 0:
            raise ValueError(f"clip_range must be two non-negative numbers, got {value}")
        return value

    def policy_for(self, invariant: str) -> Policy:
        """The policy applied to ``invariant`` (override, else ``on_violation``)."""
        return self.policies.get(invariant, self.on_violation)
