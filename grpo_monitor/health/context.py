"""What a rule evaluates against (:class:`Context`) and what it returns (:class:`Evaluation`), and the thresholds
the rules share (:data:`THRESHOLDS`: the figures they come from are in ``docs/health.md``)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from .memory import Memory
from .state import QuestionSupply

#: Every threshold of the rules, in one place (calibration: docs/health.md).
THRESHOLDS: Mapping[str, float] = {
    "degenerate_degraded": 0.6,  # share of degenerate groups, each step of the patience (G=8: p >= 0.94 or <= 0.06)
    "degenerate_stalled": 0.8,  # its mean over the patience: most of the generation carries no gradient
    "truncated_degraded": 0.5,  # share of truncated rows, each step of the patience
    "truncated_stalled": 0.9,  # its mean over the patience
    "zero_window": 10,  # recent steps the zero-gradient share is taken over (judged from the 4th step on)
    "zero_min_steps": 4,
    "zero_degraded": 0.5,  # share of those steps without signal (healthy TRL runs: 3-4% of steps)
    "zero_stalled": 0.7,
    "supply_min_repeated": 8,  # questions seen twice or more before the supply is judged
    "supply_learnable": 0.25,  # learnable share below which the supply is short
    "supply_floor": 0.2,  # effective prompts per step, as a share of the batch, the forecast aims at
    "supply_horizon": 50,  # steps ahead the forecast warns of
    "trend_min": 6,  # values a trend needs
    "trend_window": 10,  # values a trend is taken over
    "trend_kendall": 0.6,  # |Kendall tau| of a steady trend
    "entropy_drop": 0.7,  # entropy now / at the start below which a falling entropy counts
    "entropy_horizon": 200,  # steps to the floor within which a collapse is named
    "entropy_rise": 1.5,  # entropy now / at the start above which a rising entropy counts
    "plateau_window": 20,  # steps compared (first half against second half)
    "plateau_z": 1.0,  # improvement, in standard errors, below which the reward is on a plateau
    "mismatch_rise": 2.0,  # k3 now / at the start above which a climbing mismatch counts
    "length_log_ratio": 0.405,  # |log(length above / length below)| (1.5x) a length bias reaches
    # routing (docs/async_moe.md): bf16 against float32 of one tiny MoE disagrees on 1.6-1.9% (16 experts, top-4) or
    # 4.5% (64, top-8) of the pairs at every seed; weights one lr=1e-4 AdamW step apart on 24-52%; another model ~100%
    "routing_rise": 3.0,  # disagreement (1 - agreement) now / at the start at which routing is not noise
    "routing_margin": 0.01,  # ... and at least this far above the start
    "routing_floor": 0.5,  # agreement below which routing is never noise
    # staleness drop (docs/async_moe.md): pooled (Stouffer) |z| of dropped minus kept over the recent steps with drops
    "drop_z": 4.0, "drop_window": 8, "drop_min_steps": 2,
}


@dataclasses.dataclass(frozen=True)
class Context:
    """The run's settings the rules read: group size, entropy floor, mismatch error threshold, the cost of
    an hour of the run's accelerators (None: no money figure), the integration whose remedies are named."""

    group_size: int | None = None
    entropy_floor: float = 0.05
    mismatch_k3: float = 0.02
    hour_cost: float | None = None
    integration: str = "api"


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """One rule at one step: its main ``figure``, the ``severity`` it would open at (None: its condition does not
    hold this step), the ``evidence`` numbers and the ``message`` (what, the numbers, the likely cause)."""

    figure: float
    severity: str | None
    evidence: Mapping[str, float]
    message: str = ""


@dataclasses.dataclass
class Inputs:
    """A step as the rules see it: its metrics, the seconds since the previous step, the question supply."""

    metrics: Mapping[str, float]
    memory: Memory
    context: Context
    seconds: float | None = None
    supply: QuestionSupply | None = None

    def get(self, key: str) -> float:
        """The metric (NaN when absent or not a finite number)."""
        value = self.metrics.get(key)
        try:
            value = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return math.nan
        return value if math.isfinite(value) else math.nan


def pct(value: float) -> str:
    """A share as a percentage (``n/a`` for NaN)."""
    return "n/a" if not math.isfinite(value) else f"{100 * value:.0f}%"
