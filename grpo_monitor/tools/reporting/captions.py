"""Each figure's caption: one sentence on what is drawn, then statements computed from this run's log.

Statements follow a few fixed shapes (see :mod:`.facts`): ``<what> went from A <start> to
B <end>``, ``<what> stayed at A ...``, ``<what> was A`` (a 1-step run), ``<what> peaked
at A at step s``, so that a reader, or a test, can check each number against the log.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .data import RunData
from .facts import change, degenerate_check, peak, plural, sentences
from .notes import advice, rollout_gaps
from .plots import estimator_index, group_size, question_std_matrix

_RATE, _SMALL = "{:.1%}", "{:.2e}"


def _change(run: RunData, label: str, key: str, fmt: str) -> str | None:
    return change(run.steps, label, run.series(key), fmt, key)


def _advice(run: RunData, key: str) -> str:
    """What the run's integration sets to log ``key`` (:func:`.notes.advice`), for a caption's missing part."""
    return advice(key, run.integration, run.settings)


def degenerate(run: RunData) -> str:
    generated = run.has("grpo/sampling/generated_degenerate_rate")
    parts: list[str | None] = [
        "Share of groups whose rewards are all equal (no gradient from the reward term), against what independent "
        "draws predict from each question's success rate p: p^G + (1-p)^G",
    ]
    if generated:
        parts += [_change(run, "the degenerate rate of generated groups", "grpo/sampling/generated_degenerate_rate",
                          _RATE),
                  _change(run, "the iid prediction for generated groups", "grpo/sampling/degenerate_rate_iid", _RATE)]
    parts += [_change(run, "the degenerate rate of the training batch", "grpo/groups/degenerate_rate", _RATE),
              _change(run, "the iid prediction for the training batch", "grpo/groups/degenerate_rate_iid", _RATE)]
    if not run.has("grpo/groups/degenerate_rate_iid") and not run.has("grpo/sampling/degenerate_rate_iid"):
        parts.append(f"This log has no iid prediction: {_advice(run, 'grpo/groups/degenerate_rate_iid')}")
    check = degenerate_check(run)
    if check is not None:
        parts.append(check.short())
    parts.append(_rollout_gaps(run))
    return sentences(parts)


def _rollout_gaps(run: RunData) -> str | None:
    """``rollouts were logged at 2 of 3 steps: <why>`` when some steps logged none, else None."""
    values = run.series("grpo/groups/degenerate_rate")
    logged = 0 if values is None else int(np.isfinite(values).sum())
    if logged in (0, len(run.steps)):
        return None
    return (f"rollouts were logged at {logged} of {plural(len(run.steps), 'step')}: "
            f"{rollout_gaps(run.integration, run.settings)}")


def prompts(run: RunData) -> str:
    parts = ["Groups with reward variation: the prompts each update is really built from",
             _change(run, "effective prompts per step", "grpo/groups/effective_prompts", "{:.1f}"),
             _constant_or_change(run, "groups in the training batch", "grpo/groups/total"),
             _change(run, "the mean reward", "grpo/reward/mean", "{:.3f}")]
    return sentences(parts)


def _constant_or_change(run: RunData, label: str, key: str) -> str | None:
    """``there were N <label> at every step`` for a constant count, else the usual change."""
    values = run.series(key)
    finite = values[np.isfinite(values)] if values is not None else np.zeros(0)
    if finite.size and np.all(finite == finite[0]):
        return f"there were {finite[0]:.0f} {label}" + (" at every logged step" if len(run.steps) > 1 else "")
    return change(run.steps, f"the number of {label}", values, "{:.1f}", key)


def question_std(run: RunData) -> str:
    found = question_std_matrix(run)
    parts = ["Share of each step's groups at each within-group reward std; the bottom row (std 0, degenerate groups) "
             "is generation that carries no signal",
             _change(run, "the mean per-question reward std", "grpo/reward/question_std_mean", "{:.3f}")]
    if found is not None and np.isfinite(found[0]).any():
        parts.append(f"the colour scale runs from 0 to the largest cell, {float(np.nanmax(found[0])):.0%}")
    return sentences(parts)


def advantages(run: RunData) -> str:
    G = group_size(run)
    bessel = f", Bessel's sqrt((G-1)/G) = {math.sqrt((G - 1) / G):.3f} at G={G}" if G else ", Bessel's sqrt((G-1)/G)"
    parts = ["Max |group mean| and max |advantage| on degenerate groups should sit at rounding level, far below their "
             "tolerance; the live-group std is the convention's fingerprint (population z-scores give 1" + bessel + ")",
             peak(run, "the largest |group mean of advantages|", run.series("grpo/adv/group_mean_abs_max"), _SMALL),
             peak(run, "the largest |advantage| in a degenerate group", run.series("grpo/adv/degenerate_abs_max"),
                  _SMALL),
             _change(run, "the mean live-group std of advantages", "grpo/adv/live_std_mean", "{:.4f}")]
    parts += [breaches(run, name) for name in ("zero_group_mean", "degenerate_zero", "affine_in_rewards")]
    return sentences(parts)


def breaches(run: RunData, invariant: str) -> str | None:
    """"the <invariant> invariant was breached at N steps (steps ...)", or None when it never was."""
    steps = sorted({m.step for m in run.violations if m.invariant == invariant})
    if not steps:
        return None
    return f"the {invariant} invariant was breached at {plural(len(steps), 'step')} ({_step_list(steps)})"


def _step_list(steps: list[int], limit: int = 8) -> str:
    shown = ", ".join(str(s) for s in steps[:limit])
    return f"step {shown}" if len(steps) == 1 else f"steps {shown}" + (", ..." if len(steps) > limit else "")


def convention(run: RunData) -> str:
    from ...estimators.registry import CUSTOM_ID, name_of

    parts: list[str | None] = [
        "The estimator the advantages fit at each step, the advantage scale it implies and the fitted "
        "stabilizer epsilon (1/k = std + epsilon)",
    ]
    ids = estimator_index(run)
    if ids is not None:
        names = ["fit your own estimator" if i == CUSTOM_ID else _BROKEN if i < 0 else f"fit {name_of(i) or i}"
                 for i in ids[np.isfinite(ids)]]
        parts.append(_segments(names, run.steps[np.isfinite(ids)].tolist()))
    parts += [_change(run, "the advantage scale k*std", "grpo/adv/convention_scale", "{:.4f}"),
              _change(run, "the fitted stabilizer", "grpo/adv/stabilizer", "{:.2g}")]
    return sentences(parts)


_BROKEN = "broke the convention check"


def _segments(names: list[str], steps: list[int]) -> str:
    """``the advantages fit population at every logged step``, or ``... fit population at steps 0-4, then ...``."""
    if len(set(names)) == 1:
        where = "at every logged step" if len(steps) > 1 else f"at step {steps[0]}"
        return f"the advantages {names[0]} {where}"
    runs: list[tuple[str, int, int]] = []
    for name, step in zip(names, steps, strict=True):
        if runs and runs[-1][0] == name:
            runs[-1] = (name, runs[-1][1], step)
        else:
            runs.append((name, step, step))
    shown = [f"{n} at step {a}" if a == b else f"{n} at steps {a}-{b}" for n, a, b in runs[:6]]
    return "the advantages " + ", then ".join(shown) + (", ..." if len(runs) > 6 else "")


def overdispersion_stuck(run: RunData) -> str:
    parts = ["Overdispersion is the correlation of successes within a group given each question's pooled success rate "
             "(0 for iid responses, where the iid prediction holds); stuck questions have had no reward variation for "
             "several groups in a row",
             _change(run, "the overdispersion", "grpo/groups/overdispersion", "{:+.3f}"),
             _change(run, "the number of stuck questions", "grpo/sampling/stuck_questions", "{:.1f}")]
    if not run.has("grpo/groups/overdispersion"):
        parts.append(f"This log has no overdispersion: {_advice(run, 'grpo/groups/overdispersion')}")
    return sentences(parts)


def kl(run: RunData) -> str:
    parts = ["Per-token estimators of KL(policy || reference): k1 is unbiased but noisy and can go negative, "
             "k2 is biased, k3 is unbiased and never negative",
             _change(run, "the k3 estimate per token", "grpo/kl/k3_mean", "{:.3g}"),
             _change(run, "the KL your loss uses (grpo/kl/user_mean)", "grpo/kl/user_mean", "{:.3g}"),
             change(run.steps, "the exact KL of the demo policy", run.theory.get("kl_per_token"), "{:.3g}")]
    k1 = run.series("grpo/kl/k1_mean")
    if k1 is not None and np.isfinite(k1).any():
        negative = int((k1[np.isfinite(k1)] < 0).sum())
        parts.append(f"the k1 estimate was negative at {negative} of {plural(int(np.isfinite(k1).sum()), 'step')}")
    return sentences(parts)


def ratio(run: RunData) -> str:
    parts = ["The importance ratio pi_theta / pi_old is 1 on the first inner epoch of an on-policy update; "
             "clipped tokens get no gradient from the surrogate",
             _change(run, "the mean importance ratio", "grpo/ratio/mean", "{:.4f}"),
             _change(run, "the clip fraction", "grpo/ratio/clip_frac", _RATE),
             peak(run, "the largest |log ratio|", run.series("grpo/ratio/log_abs_max"), _SMALL)]
    return sentences(parts)


def tokens(run: RunData) -> str:
    parts = ["Valid tokens (mask 1) per response, and the share of them in responses with a non-zero advantage (the "
             "rest come from degenerate groups and carry no policy gradient)",
             _change(run, "the mean response length in tokens", "grpo/tokens/response_length_mean", "{:.2f}"),
             _change(run, "the live-token fraction", "grpo/tokens/live_fraction", _RATE)]
    return sentences(parts)


def sampling(run: RunData) -> str:
    parts = ["Dynamic sampling regenerates until groups have reward variation: a retained group costs G / alpha "
             "responses with alpha = 1 - p^G - (1-p)^G",
             _change(run, "responses generated per retained group", "grpo/sampling/responses_per_retained_group",
                     "{:.1f}"),
             _change(run, "the retention rate", "grpo/sampling/retention_rate", _RATE)]
    return sentences(parts)


def violations(run: RunData) -> str:
    by_name: dict[str, list[int]] = {}
    for mark in run.violations:
        by_name.setdefault(mark.invariant, []).append(mark.step)
    listed = "; ".join(f"{name} at {_step_list(sorted(set(steps)))}" for name, steps in sorted(by_name.items()))
    parts = [f"{plural(len(run.violations), 'violation')} of {plural(len(by_name), 'invariant')}: {listed}"]
    if run.failed_step is not None:
        parts.append(f"the breach at step {run.failed_step} stopped the run (X)")
    return sentences(parts)


CAPTIONS: dict[str, Callable[[RunData], str]] = {
    "violations": violations, "degenerate": degenerate, "prompts": prompts, "question_std": question_std,
    "advantages": advantages, "convention": convention, "overdispersion_stuck": overdispersion_stuck, "kl": kl,
    "ratio": ratio, "tokens": tokens, "sampling": sampling,
}
