"""The invariants' relative tolerances: :attr:`MonitorConfig.tolerances <grpo_monitor.MonitorConfig>`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .aliases import TOLERANCE_ALIASES, renamed, warn_renamed


class Tolerances(BaseModel):
    """Relative tolerances of the invariants.

    "Typical |advantage|" below is the median |advantage| over rows of groups with reward
    variation in the batch, so the tolerances do not depend on the reward scale.
    """

    model_config = ConfigDict(extra="forbid")

    zero_group_mean: float = Field(1e-3, gt=0, description="max |group mean of advantages| / typical |advantage|")
    affine_residual: float = Field(
        1e-3, gt=0, description="max over groups of the rms residual of a = k (r - mean) + b / typical |advantage|"
    )
    degenerate_ratio: float = Field(0.01, gt=0, description="max |advantage| in all-equal groups / typical |advantage|")
    degenerate_error: float = Field(
        0.25, gt=0, description="above this x a live group's advantage std, an all-equal group's residue is an "
        "error even when float32 rounding explains it (below it, and explained: a warning)",
    )
    unscorable: float = Field(1e-6, gt=0, description="max |advantage| on NaN-reward rows / typical |advantage|")
    stabilizer_spread: float = Field(
        2e-3, gt=0, description="spread of the fitted stabilizer / typical 1/k (the classic estimators' device "
        "fit; formerly convention)")
    estimator_residual: float = Field(
        1e-3, gt=0, description="max per-group rms residual of a replayed estimator / typical |advantage|",
    )
    max_stabilizer_ratio: float = Field(
        0.05, ge=0, description="largest plausible stabilizer, as a fraction of the mean reward std of live groups "
        "(a replayed estimator's fitted epsilon above it is not a fit; on the device it decides population "
        "against Bessel when both fit, and otherwise a common epsilon across groups of different stds is "
        "identified whatever its size)"
    )
    token_constant: float = Field(1e-4, gt=0, description="within-row spread of token advantages / typical |advantage|")
    on_policy: float = Field(
        1e-3, gt=0, description="max |logprobs - old_logprobs| (nats) in the declared bitwise mode (on_policy_bitwise)")
    mismatch_k3: float = Field(
        0.02, gt=0, description="largest mismatch KL k3 (nats per token) numerical noise gives between the sampler "
        "and the trainer (docs/mismatch.md); above it the mismatch is a defect (error); also the on_policy rule",
    )
    mismatch_ratio_z: float = Field(
        8.0, gt=0, description="largest |mean importance weight - 1| in standard errors noise gives; above it (and "
        "above mismatch_ratio_bias) the sampler's log-probs are not those of the distribution it sampled from "
        "(warning)",
    )
    mismatch_ratio_bias: float = Field(
        0.02, gt=0, description="smallest |mean importance weight - 1| worth a warning: above what noise gives on "
        "a few hundred tokens (docs/mismatch.md); below it a significant bias changes the weights by under 2%",
    )
    loss_weight_rel: float = Field(
        1e-5, gt=0, description="max relative deviation of a row's measured token weight from the declared "
        "loss_aggregation's (formerly named loss_aggregation, like that setting), at least 16 epsilons of the "
        "weights' dtype (docs/loss_weights.md: float32 noise 9e-8)",
    )

    @model_validator(mode="before")
    @classmethod
    def _older_names(cls, data: Any) -> Any:
        """``convention=`` and ``loss_aggregation=`` (the older names) still set their tolerance, with a warning."""
        return renamed("Tolerances", data, TOLERANCE_ALIASES) if isinstance(data, dict) else data

    @property
    def convention(self) -> float:
        """Deprecated: :attr:`stabilizer_spread` under its older name."""
        warn_renamed("Tolerances", "convention", "stabilizer_spread")
        return self.stabilizer_spread

    @property
    def loss_aggregation(self) -> float:
        """Deprecated: :attr:`loss_weight_rel` under its older name (a float, unlike the setting of that name)."""
        warn_renamed("Tolerances", "loss_aggregation", "loss_weight_rel")
        return self.loss_weight_rel
