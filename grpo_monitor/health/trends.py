"""The rules of a run whose course goes wrong: entropy collapsing or exploding, the reward on a plateau, the
sampler mismatch drifting up, lengths diverging by reward. Each is a robust trend (Theil-Sen slope and
Kendall's tau over a short window, :func:`~grpo_monitor.health.memory.theil_sen`) of a synced metric."""

from __future__ import annotations

import math
import statistics

from .context import THRESHOLDS as T
from .context import Evaluation, Inputs
from .memory import mean, theil_sen


def fold(x: Inputs) -> None:
    """Add the step's trended figures to the memory."""
    above, below = x.get("grpo/rows/length_above_mean"), x.get("grpo/rows/length_below_mean")
    groups, size = x.get("grpo/groups/total"), x.context.group_size or 1
    qstd = x.get("grpo/reward/question_std_mean")
    x.memory.push("entropy", x.get("grpo/entropy/mean"))
    x.memory.push("reward", x.get("grpo/reward/mean"))
    x.memory.push("reward_se", qstd / math.sqrt(groups * size) if groups > 0 else math.nan)
    x.memory.push("k3", x.get("grpo/mismatch/k3_mean"))
    x.memory.push("length", math.log(above / below) if above > 0 and below > 0 else math.nan)


def _trend(x: Inputs, name: str) -> tuple[list[float], float, float, float]:
    """The series' window, its Theil-Sen slope and Kendall tau, and its current level (median of the last 3)."""
    values = x.memory.recent(name, int(T["trend_window"]))
    slope, tau = theil_sen(values) if len(values) >= T["trend_min"] else (math.nan, math.nan)
    return values, slope, tau, statistics.median(values[-3:]) if values else math.nan


def entropy_collapse(x: Inputs, patience: int) -> Evaluation | None:
    """Entropy falling steadily: the steps until it reaches the floor at the current trend."""
    values, slope, tau, now = _trend(x, "entropy")
    if not values:
        return None
    start, floor = x.memory.start("entropy"), x.context.entropy_floor
    steps = math.inf
    if math.isfinite(slope) and slope < 0:
        steps = max(0.0, (now - floor) / -slope)
    falling = math.isfinite(tau) and tau <= -T["trend_kendall"] and now <= T["entropy_drop"] * start
    severity = "degraded" if falling and (steps <= T["entropy_horizon"] or now <= floor) else None
    plateau = reward_plateau(x, 1)
    on_plateau = 1.0 if plateau is not None and plateau.severity is not None else 0.0
    evidence = {"entropy": now, "entropy_start": start, "slope_per_step": slope, "kendall_tau": tau,
                "steps_to_floor": steps, "floor": floor, "reward_plateau": on_plateau}
    message = (f"The mean token entropy fell from {start:.3g} to {now:.3g} nats (robust slope {slope:.3g} per "
               f"step, Kendall tau {tau:.2f}); at this trend it reaches the floor {floor:g} in about {steps:.0f} "
               "steps" + (", while the reward is on a plateau" if on_plateau else "")
               + ". Likely cause: a learning rate too high or no entropy regularisation.")
    return Evaluation(steps, severity, evidence, message)


def entropy_explosion(x: Inputs, patience: int) -> Evaluation | None:
    """Entropy rising steadily well above its starting level."""
    values, slope, tau, now = _trend(x, "entropy")
    start = x.memory.start("entropy")
    if not values or not start > 0:
        return None
    ratio = now / start
    rising = math.isfinite(tau) and tau >= T["trend_kendall"] and ratio >= T["entropy_rise"]
    evidence = {"entropy": now, "entropy_start": start, "slope_per_step": slope, "kendall_tau": tau}
    message = (f"The mean token entropy rose from {start:.3g} to {now:.3g} nats ({ratio:.2f}x; Kendall tau "
               f"{tau:.2f}). Likely cause: a learning rate or an entropy bonus too high.")
    return Evaluation(ratio, "degraded" if rising else None, evidence, message)


def reward_plateau(x: Inputs, patience: int) -> Evaluation | None:
    """The mean reward's improvement over the window (second half against first), in standard errors of the
    per-step noise measured from the per-question reward std; a plateau below ``plateau_z``."""
    window = int(T["plateau_window"])
    reward, se = x.memory.recent("reward", window), x.memory.recent("reward_se", window)
    if len(reward) < window or len(se) < window // 2:
        return None
    half = window // 2
    gain = mean(reward[half:]) - mean(reward[:half])
    noise = math.sqrt(2 * mean([s * s for s in se]) / half)
    z = gain / noise if noise > 0 else (0.0 if gain == 0 else math.copysign(math.inf, gain))
    evidence = {"reward_gain": gain, "noise_se": noise, "reward": mean(reward[half:])}
    message = (f"The mean reward moved by {gain:+.3g} between the two halves of the last {window} steps, "
               f"{z:+.2f} standard errors of the noise measured from the per-question reward variance "
               f"({noise:.3g}). Likely cause: no learning signal left, or a learning rate too low.")
    return Evaluation(z, "info" if z < T["plateau_z"] else None, evidence, message)


def mismatch_drift(x: Inputs, patience: int) -> Evaluation | None:
    """The sampler/trainer mismatch k3 climbing over the run while under its error threshold."""
    values, slope, tau, now = _trend(x, "k3")
    start = x.memory.start("k3")
    if not values or not start >= 0:
        return None
    ratio = now / start if start > 0 else (math.inf if now > 0 else 1.0)
    limit = x.context.mismatch_k3
    drifting = math.isfinite(tau) and tau >= T["trend_kendall"] and ratio >= T["mismatch_rise"] and now < limit
    evidence = {"k3_mean": now, "k3_start": start, "slope_per_step": slope, "kendall_tau": tau, "error_at": limit}
    message = (f"The sampler/trainer mismatch KL k3 climbed from {start:.3g} to {now:.3g} nats per token "
               f"({ratio:.2f}x; Kendall tau {tau:.2f}), still under the error threshold {limit:g}. Likely cause: the "
               "policy moving into tokens where the engines' numerics differ, or a growing policy lag.")
    return Evaluation(ratio, "info" if drifting else None, evidence, message)


def length_bias(x: Inputs, patience: int) -> Evaluation | None:
    """log(length above / below the group's mean reward) moving steadily away from 0."""
    values, slope, tau, now = _trend(x, "length")
    if not values:
        return None
    steady = math.isfinite(tau) and abs(tau) >= T["trend_kendall"] and (slope * now > 0)
    biased = steady and abs(now) >= T["length_log_ratio"]
    evidence = {"log_length_ratio": now, "slope_per_step": slope, "kendall_tau": tau,
                "length_slope": x.get("grpo/weights/length_slope"),
                "long_quarter_share": x.get("grpo/weights/long_quarter_share")}
    longer = "longer" if now > 0 else "shorter"
    message = (f"Responses above their group's mean reward are {math.exp(abs(now)):.2f}x {longer} than those below, "
               f"and the gap grows (Kendall tau {tau:.2f}). Likely cause: a reward correlated with length, or a "
               "token-sum loss that weighs long responses more.")
    return Evaluation(now, "info" if biased else None, evidence, message)
