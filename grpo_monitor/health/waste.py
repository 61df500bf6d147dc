"""The rules of a run that generates without learning: degenerate groups, the question supply, truncation and
steps without gradient. Each reads the step's already-synced metrics and the :class:`Memory` windows;
:func:`fold` adds the step to the memory first."""

from __future__ import annotations

import math
import statistics

from .context import THRESHOLDS as T
from .context import Evaluation, Inputs, pct
from .memory import mean, theil_sen


def wasted_fraction(x: Inputs) -> float:
    """Share of the step's generation whose advantage is zero: the valid tokens outside live rows when token
    counts are known (all of them when no token is valid), else the degenerate share of the groups; times the
    retained share when dynamic sampling discarded groups. NaN when the step has neither."""
    valid, live = x.get("grpo/tokens/valid"), x.get("grpo/tokens/live_fraction")
    if valid == 0:
        wasted = 1.0
    elif math.isfinite(live):
        wasted = 1.0 - live
    else:
        wasted = x.get("grpo/groups/degenerate_rate")
    retention = x.get("grpo/sampling/retention_rate")
    if math.isfinite(retention) and math.isfinite(wasted):
        wasted = 1.0 - (1.0 - wasted) * min(max(retention, 0.0), 1.0)
    return wasted


def zero_gradient(x: Inputs) -> float:
    """1.0 when the step's update carries no signal (no valid token, no live group, no live token, or measured
    weights on no response), 0.0 when it does, NaN when the step says nothing about it."""
    signs = [x.get("grpo/tokens/valid"), x.get("grpo/tokens/live_fraction"),
             x.get("grpo/groups/effective_prompts") if x.get("grpo/groups/total") > 0 else math.nan,
             x.get("grpo/weights/effective_responses")]
    known = [s for s in signs if math.isfinite(s)]
    if not known:
        return math.nan
    return 1.0 if any(s == 0 for s in known) else 0.0


def fold(x: Inputs) -> dict[str, float]:
    """Add the step to the memory; the step's ``grpo/health/wasted_generation_frac`` (when known)."""
    mem = x.memory
    wasted = wasted_fraction(x)
    mem.add("steps", 1)
    zero = zero_gradient(x)
    if math.isfinite(zero):
        mem.push("zero", zero)
        mem.add("zero_steps", zero)
        mem.add("judged_steps", 1)
    groups = x.get("grpo/groups/total")
    for name, value in (("degenerate", x.get("grpo/groups/degenerate_rate")),
                        ("truncated", x.get("grpo/rows/truncated_rate")),
                        ("effective", x.get("grpo/groups/effective_prompts") / groups if groups > 0 else math.nan),
                        ("wasted", wasted)):
        mem.push(name, value)
    if x.seconds is not None and math.isfinite(x.seconds) and x.seconds >= 0:
        mem.add("seconds", x.seconds)
        if math.isfinite(wasted):
            mem.add("wasted_seconds", x.seconds * wasted)
    return {} if not math.isfinite(wasted) else {"grpo/health/wasted_generation_frac": wasted}


def _held(x: Inputs, series: str, threshold: float, patience: int) -> tuple[bool, float]:
    """Whether ``series`` reached ``threshold`` at this step, and its mean over the last ``patience`` steps."""
    recent = x.memory.recent(series, patience)
    return bool(recent and recent[-1] >= threshold), mean(recent)


def _money(x: Inputs) -> tuple[dict[str, float], str]:
    """The wasted wall-clock (and its cost when ``gpu_hour_cost`` is set) as evidence and as words."""
    seconds, wasted = x.memory.total("seconds"), x.memory.total("wasted_seconds")
    if seconds <= 0:
        return {}, ""
    out = {"wasted_seconds": wasted, "seconds": seconds}
    text = f"; {wasted:.1f} s of the {seconds:.1f} s between steps went to it"
    if x.context.hour_cost is not None:
        out["wasted_cost"] = wasted / 3600 * x.context.hour_cost
        text += f" (about {out['wasted_cost']:.4g} at gpu_hour_cost={x.context.hour_cost:g})"
    return out, text


def degenerate_dominated(x: Inputs, patience: int) -> Evaluation | None:
    """Most groups degenerate: the share, its saturated/unsolved split, effective prompts, wasted generation."""
    if not x.memory.recent("degenerate", 1) or not math.isfinite(x.get("grpo/groups/degenerate_rate")):
        return None
    held, level = _held(x, "degenerate", T["degenerate_degraded"], patience)
    high, low = x.get("grpo/groups/degenerate_high_rate"), x.get("grpo/groups/degenerate_low_rate")
    groups, effective = x.get("grpo/groups/total"), x.get("grpo/groups/effective_prompts")
    wasted = mean(x.memory.recent("wasted", patience))
    money, money_text = _money(x)
    evidence = {"degenerate_rate": level, "saturated_rate": high, "unsolved_rate": low, "effective_prompts": effective,
                "groups": groups, "wasted_generation_frac": wasted, **money}
    kind = "saturated" if high >= low else "unsolved"
    if not (math.isfinite(high) and math.isfinite(low)):
        kind = "degenerate"
    severity = None if not held else "stalled" if level >= T["degenerate_stalled"] else "degraded"
    cause = {"saturated": "the questions are too easy for the policy (every response at the top reward) or the "
                          "reward is constant for them",
             "unsolved": "the questions are too hard for the policy (every response at the bottom reward) or the "
                         "verifier always fails",
             "degenerate": "all-equal rewards within groups"}[kind]
    message = (f"{pct(level)} of groups were degenerate over the last {patience} steps ({pct(high)} saturated, "
               f"{pct(low)} unsolved at step's split): {effective:.3g} effective prompts of {groups:.0f} in the "
               f"batch; {pct(wasted)} of the generation carried no gradient{money_text}. Likely cause: {cause}.")
    return Evaluation(level, severity, evidence, message)


def prompt_supply(x: Inputs, patience: int) -> Evaluation | None:
    """The questions still learnable across sightings, and a forecast of when effective prompts reach the floor."""
    supply = x.supply
    shares = supply.shares() if supply is not None else {}
    effective = x.memory.recent("effective", 20)
    slope, tau = theil_sen(effective)
    now = statistics.median(effective[-3:]) if effective else math.nan
    steps = math.inf
    if math.isfinite(slope) and slope < 0 and len(effective) >= T["trend_min"] and tau <= -T["trend_kendall"]:
        steps = max(0.0, (now - T["supply_floor"]) / -slope)
    if not shares and not math.isfinite(now):
        return None
    learnable = shares.get("learnable", math.nan)
    repeated = supply.repeated if supply is not None else 0
    short = repeated >= T["supply_min_repeated"] and learnable < T["supply_learnable"]
    soon = steps <= T["supply_horizon"] and now > T["supply_floor"]
    severity = "degraded" if short else "info" if soon else None
    evidence = {"learnable_frac": learnable, "saturated_frac": shares.get("saturated", math.nan),
                "unsolved_frac": shares.get("unsolved", math.nan), "repeated_questions": float(repeated),
                "effective_frac": now, "steps_to_floor": steps}
    message = (f"Of {repeated} questions seen twice or more, {pct(learnable)} are learnable "
               f"({pct(evidence['saturated_frac'])} saturated at every sighting, {pct(evidence['unsolved_frac'])} "
               f"unsolved at every sighting); effective prompts are {pct(now)} of the batch"
               + (f" and fall to {pct(T['supply_floor'])} in about {steps:.0f} steps at the current trend"
                  if math.isfinite(steps) else "") + ". Likely cause: the dataset is learned or beyond the policy.")
    return Evaluation(learnable, severity, evidence, message)


def truncation_dominated(x: Inputs, patience: int) -> Evaluation | None:
    """Most rows cut at the length limit and the cut costing signal: masked out of the loss, or leaving their
    groups degenerate at the bottom reward. Truncated rows that still get a varied reward are not a stall."""
    rate = x.get("grpo/rows/truncated_rate")
    if not math.isfinite(rate):
        return None
    masked = _truncated_masked(x, rate)
    cut = x.get("grpo/groups/degenerate_truncated_rate")
    lost = min(cut, x.get("grpo/groups/degenerate_low_rate")) if math.isfinite(cut) else math.nan
    x.memory.push("truncation_cost", rate if masked == 1.0 else lost if math.isfinite(lost) else 0.0)
    held, level = _held(x, "truncated", T["truncated_degraded"], patience)
    cost = mean(x.memory.recent("truncation_cost", patience))
    held = held and x.memory.recent("truncation_cost", 1)[-1] >= T["truncated_degraded"]
    evidence = {"truncated_rate": level, "degenerate_truncated_rate": cut, "valid_tokens": x.get("grpo/tokens/valid"),
                "truncated_rows_masked": masked, "signal_lost": cost}
    severity = None if not held else "stalled" if min(level, cost) >= T["truncated_stalled"] else "degraded"
    gradient = {1.0: "masked out of the loss, so they carry no gradient",
                0.0: "still in the loss"}.get(masked, "")
    message = (f"{pct(level)} of completions were cut at the length limit over the last {patience} steps"
               + (f", {gradient}" if gradient else "")
               + f"; {pct(cut)} of groups are degenerate with every row truncated. Likely cause: a length limit "
               "below what the task needs, or a policy that does not stop.")
    return Evaluation(level, severity, evidence, message)


def _truncated_masked(x: Inputs, rate: float) -> float:
    """1.0 when the loss's rows leave the truncated ones out, 0.0 when they keep them, NaN when unknown."""
    rows, groups, size = x.get("grpo/tokens/rows"), x.get("grpo/groups/total"), x.context.group_size
    if x.get("grpo/tokens/valid") == 0 and rate > 0:
        return 1.0
    if not (math.isfinite(rows) and groups > 0 and size) or rate <= 0:
        return math.nan
    kept = rows / (groups * size)
    return 1.0 if kept <= 1.0 - rate + 0.5 * rate else 0.0


def zero_gradient_steps(x: Inputs, patience: int) -> Evaluation | None:
    """Steps without signal: counted, their share of the run so far and of the recent steps."""
    judged = x.memory.total("judged_steps")
    if judged <= 0:
        return None
    recent = x.memory.recent("zero", int(T["zero_window"]))
    share, recent_share = x.memory.total("zero_steps") / judged, mean(recent)
    severity = None
    if len(recent) >= T["zero_min_steps"]:
        severity = "stalled" if recent_share >= T["zero_stalled"] else \
            "degraded" if recent_share >= T["zero_degraded"] else None
    evidence = {"zero_gradient_steps": x.memory.total("zero_steps"), "steps": judged, "recent_share": recent_share,
                "valid_tokens": x.get("grpo/tokens/valid"), "effective_prompts": x.get("grpo/groups/effective_prompts")}
    message = (f"{x.memory.total('zero_steps'):.0f} of {judged:.0f} steps so far ({pct(share)}; {pct(recent_share)} "
               f"of the last {len(recent)}) carried no gradient: no valid loss token, every advantage zero or every "
               "measured token weight zero. Likely cause: every completion masked (truncation) or every group "
               "degenerate.")
    return Evaluation(share, severity, evidence, message)
