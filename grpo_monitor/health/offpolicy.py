"""The rules of an asynchronous or MoE run whose updates are off the sampled policy: routing that disagrees with the
engine's beyond numerical noise, and a staleness drop that keeps a biased sample. Each reads the step's synced
``grpo/moe/*`` and ``grpo/offpolicy/drop_*_z`` metrics and the :class:`Memory` windows (calibration:
docs/async_moe.md)."""

from __future__ import annotations

import math
import statistics

from .context import THRESHOLDS as T
from .context import Evaluation, Inputs, pct

_DROP_Z = ("reward", "pass", "length")


def fold(x: Inputs) -> None:
    """Add the step's routing disagreement and drop z's to the memory."""
    x.memory.push("routing", 1.0 - x.get("grpo/moe/agreement"))
    for q in _DROP_Z:
        x.memory.push(f"drop_z_{q}", x.get(f"grpo/offpolicy/drop_{q}_z"))


def routing_disagreement(x: Inputs, patience: int) -> Evaluation | None:
    """Routing agreement under its floor, or its disagreement grown well above its start level (the noise)."""
    recent = x.memory.recent("routing", 3)
    if not recent or not math.isfinite(x.get("grpo/moe/agreement")):
        return None
    now, start = statistics.median(recent), x.memory.start("routing")
    agreement = 1.0 - now
    grown = now >= T["routing_rise"] * start and now >= start + T["routing_margin"]
    bad = agreement < T["routing_floor"] or grown
    evidence = {"agreement": agreement, "start_agreement": 1.0 - start, "topk_overlap": x.get("grpo/moe/topk_overlap"),
                "layer_min": x.get("grpo/moe/agreement_layer_min"),
                "fallback_frac": x.get("grpo/moe/replay_fallback_frac")}
    message = (f"The trainer and the engine chose the same experts for {pct(agreement)} of (token, MoE layer) "
               f"pairs (recent median; {pct(1.0 - start)} over the first steps, worst layer "
               f"{pct(evidence['layer_min'])}, top-k overlap {pct(evidence['topk_overlap'])}). Likely cause: the "
               "engine routes with stale or other weights, or computes a router differently.")
    return Evaluation(agreement, "degraded" if bad else None, evidence, message)


def staleness_bias(x: Inputs, patience: int) -> Evaluation | None:
    """Dropped minus kept rows, pooled over the recent steps with drops: reward, pass rate, length."""
    pooled = {}
    for q in _DROP_Z:
        zs = x.memory.recent(f"drop_z_{q}", int(T["drop_window"]))
        if len(zs) >= T["drop_min_steps"]:
            pooled[q] = sum(zs) / math.sqrt(len(zs))
    if not pooled or not math.isfinite(x.get("grpo/offpolicy/drop_bias_z")):
        return None
    worst = max(pooled, key=lambda q: abs(pooled[q]))
    figure = abs(pooled[worst])
    evidence = {f"{q}_z_pooled": z for q, z in pooled.items()}
    evidence.update(dropped_frac=x.get("grpo/offpolicy/dropped_frac"),
                    dropped_reward=x.get("grpo/offpolicy/dropped_reward_mean"),
                    kept_reward=x.get("grpo/offpolicy/kept_reward_mean"))
    side = "higher" if pooled[worst] > 0 else "lower"
    steps = len(x.memory.recent(f"drop_z_{worst}", int(T["drop_window"])))
    message = (f"Rows dropped for staleness have a {side} {worst} than the kept ones, {figure:.1f} standard errors "
               f"pooled over the last {steps} steps with drops "
               f"(dropped reward {evidence['dropped_reward']:.3g}, kept {evidence['kept_reward']:.3g}, "
               f"{pct(evidence['dropped_frac'])} dropped). Likely cause: slow, hard problems exceed the staleness "
               "bound, so training sees the fast, easy ones.")
    return Evaluation(figure, "degraded" if figure > T["drop_z"] else None, evidence, message)
