"""The report's rollout-side figures: one function per figure, drawn on a fresh matplotlib Figure.

Each function returns None when the run logged none of what it draws. Shared helpers
(canvases, lines, fitted axes) are in :mod:`.plots_core`; the token-side figures (ratio,
response length) in :mod:`.plots_tokens`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...estimators.registry import CUSTOM_ID, ESTIMATORS, name_of
from ...stats.scale_fit import CONVENTIONS
from .data import RunData, declared_group_size
from .plots_core import (
    BLUE,
    GREEN,
    GREY,
    LOG_FLOOR,
    ORANGE,
    PURPLE,
    RED,
    figure,
    finish,
    fit_ylim,
    line,
    log_panel,
    noisy,
    percent,
    reference,
    rolling_mean,
    set_steps,
    smoothed,
    stacked,
)

__all__ = ["LOG_FLOOR", "draw_advantages", "draw_convention", "draw_degenerate", "draw_overdispersion_stuck", "draw_kl",
           "draw_prompts", "draw_question_std", "draw_sampling", "draw_violations", "group_size",
           "question_std_matrix", "rolling_mean"]

#: The ``grpo/adv/values`` histogram holds at most this many rows (sampled evenly beyond).
_ADV_SAMPLE = 1024
_CONVENTION_LABELS = {"none": "none (mean-centred only)", "leave_one_out": "leave-one-out"}
_IID_LABEL = "iid prediction p^G + (1-p)^G (monitor, pooled per-question success rate)"
_EXACT_LABEL = "exact p^G + (1-p)^G from the demo policy"


def draw_degenerate(run: RunData):
    """Observed degenerate rate against the iid prediction (and the demo's exact value).

    With dynamic sampling the generated groups come first: the training batch is filtered.
    """
    generated = run.has("grpo/sampling/generated_degenerate_rate")
    if not run.has("grpo/groups/degenerate_rate") and not generated:
        return None
    fig, axes = figure(2 if generated else 1)
    if generated:
        ax = axes[0]
        noisy(ax, run, run.series("grpo/sampling/generated_degenerate_rate"), BLUE, "observed")
        line(ax, run, smoothed(run, run.series("grpo/sampling/degenerate_rate_iid")), ORANGE, _IID_LABEL)
        line(ax, run, smoothed(run, run.theory.get("expected_generated_degenerate_rate")), "black", _EXACT_LABEL, ":")
        percent(ax)
        finish(ax, run, "degenerate groups", "Every generated group (dynamic sampling, discarded included)")
    ax = axes[-1]
    if run.has("grpo/groups/degenerate_rate"):
        noisy(ax, run, run.series("grpo/groups/degenerate_rate"), BLUE, "observed")
    line(ax, run, smoothed(run, run.series("grpo/groups/degenerate_rate_iid")), ORANGE, _IID_LABEL)
    title = "Training batch: groups with no reward variation"
    if generated:
        title = "Training batch after filtering (0 by construction; iid: what these questions give unfiltered)"
    else:
        line(ax, run, smoothed(run, run.theory.get("expected_degenerate_rate")), "black", _EXACT_LABEL, ":")
    percent(ax)
    finish(ax, run, "degenerate groups", title)
    ax.set_xlabel("step")
    return fig


def draw_prompts(run: RunData):
    """Effective prompts (groups with variation) per step, and the mean reward."""
    if not run.has("grpo/groups/effective_prompts"):
        return None
    fig, (ax, ax2) = figure(2, height=2.6)
    noisy(ax, run, run.series("grpo/groups/effective_prompts"), GREEN, "effective prompts")
    line(ax, run, run.series("grpo/groups/total"), GREY, "groups in the training batch", (0, (5, 3)), zorder=4,
         **({} if len(run.steps) <= 30 else {"marker": None}))  # a short run's points need their markers
    fit_ylim(ax, floor=0.0, extra=[0.0], integer=True)
    finish(ax, run, "groups", "Effective prompts: the groups the update is really made of")
    noisy(ax2, run, run.series("grpo/reward/mean"), BLUE, "mean reward (training batch)")
    line(ax2, run, run.theory.get("mean_success_prob"), "black", "mean sigmoid(z_q) over all questions (demo policy)",
         ":")
    fit_ylim(ax2, min_span=0.05)
    finish(ax2, run, "reward", "Reward")
    ax2.set_xlabel("step")
    return fig


def question_std_matrix(run: RunData, bins: int = 25, max_columns: int = 60) -> tuple[np.ndarray, list[str]] | None:
    """(fraction of groups per row and column, row labels) of ``grpo/reward/question_std``.

    Consecutive steps are pooled so that there are at most ``max_columns`` columns. The
    bottom row is always the degenerate groups (std exactly 0). Two-valued rewards (0/1, or
    any two values) give a group std of c * sqrt(k (G - k)) for k successes of G, whatever
    the convention: then each such value gets its own row. Any other rewards (continuous,
    or G unknown) are binned: the range above 0 is cut into equal bins (at most ``bins``,
    about the square root of the number of values), so the heatmap shows a distribution,
    not one row per distinct value.
    """
    per_step = run.histograms.get("grpo/reward/question_std")
    if not per_step or not any(per_step):
        return None
    finite = [np.asarray([v for v in (h or []) if v is not None and math.isfinite(v)], dtype=float) for h in per_step]
    finite = [np.round(h, 9) for h in finite]
    values = np.concatenate([h for h in finite if h.size]) if any(h.size for h in finite) else np.zeros(0)
    live = np.unique(values[values > 0])
    if _two_valued(live, group_size(run)):
        distinct = np.concatenate([[0.0], live])
        edges = np.concatenate([[-np.inf], (distinct[1:] + distinct[:-1]) / 2, [np.inf]])
        labels = [f"{v:.3g}" + (" (degenerate)" if v == 0 else "") for v in distinct]
    else:
        top = float(live.max()) if live.size else 1.0
        n = int(min(bins, max(4, math.ceil(math.sqrt(max(1, int((values > 0).sum())))))))
        inner = np.linspace(0.0, top * 1.0001, n + 1)
        edges = np.concatenate([[-np.inf, 1e-12], inner[1:]])  # row 0: exactly 0; then (0, top]
        labels = ["0 (degenerate)"] + [f"{lo:.3g}\u2013{hi:.3g}" for lo, hi in zip(inner[:-1], inner[1:], strict=True)]
    pool = max(1, math.ceil(len(finite) / max_columns))
    columns = [np.concatenate(finite[i:i + pool]) for i in range(0, len(finite), pool)]
    matrix = np.full((len(edges) - 1, len(columns)), np.nan)
    for i, h in enumerate(columns):
        if h.size:
            matrix[:, i] = np.histogram(h, bins=edges)[0] / h.size
    return matrix, labels


def _two_valued(live: np.ndarray, G: int | None) -> bool:
    """Whether the distinct non-zero group stds (sorted) are c * sqrt(k (G - k)) for one c and integers k in
    1..G/2 (two-valued rewards, G fixed). Each candidate c (the largest value at one k) is checked in one pass:
    a value's k is the nearer integer to its inverse, so the work is G/2 passes over the values."""
    if G is None or not live.size or len(live) > G // 2:
        return False
    tol = 1e-6 * np.maximum(live, 1e-12) + 1e-9
    for top in range(1, G // 2 + 1):  # the largest value is c * sqrt(top (G - top)) for one of them
        c2 = live[-1] ** 2 / (top * (G - top))
        k = (G - np.sqrt(np.maximum(G * G - 4 * live**2 / c2, 0.0))) / 2  # k (G - k) = (v / c)^2, k <= G / 2
        near = [np.clip(np.floor(k), 1, G // 2), np.clip(np.ceil(k), 1, G // 2)]
        if (np.min([np.abs(np.sqrt(n * (G - n) * c2) - live) for n in near], axis=0) <= tol).all():
            return True
    return False


def draw_question_std(run: RunData):
    """Heatmap: how the per-question reward std is distributed, step by step (colours fitted to the data)."""
    from matplotlib.ticker import PercentFormatter

    found = question_std_matrix(run)
    if found is None:
        return None
    matrix, labels = found
    fig, (ax,) = figure(1, height=max(2.6, 0.32 * len(labels) + 1.4) if len(labels) <= 12 else 3.6)
    x0, x1 = float(run.steps[0]) - 0.5, float(run.steps[-1]) + 0.5  # a column centred on its step
    top = float(np.nanmax(matrix)) if np.isfinite(matrix).any() else 1.0
    image = ax.imshow(matrix, origin="lower", aspect="auto", interpolation="nearest", cmap="viridis",
                      extent=(x0, x1, -0.5, len(labels) - 0.5), vmin=0.0, vmax=max(top, 1e-9))
    bar = fig.colorbar(image, ax=ax, label="share of the step's groups", pad=0.01)
    bar.ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    stride = max(1, len(labels) // 12)
    ax.set_yticks(range(0, len(labels), stride), labels[::stride])
    marks = "; vertical lines: violations" if run.violations else ""
    finish(ax, run, "reward std in a group",
           f"Per-question reward std over time (bottom row: degenerate groups{marks})", headroom=False)
    ax.set_xlim(x0, x1)
    ax.grid(False)
    ax.set_xlabel("step")
    return fig


def draw_advantages(run: RunData):
    """The advantage invariants: zero group mean, unit live std, zero on degenerate groups."""
    from ...config import Tolerances

    keys = ("grpo/adv/group_mean_abs_max", "grpo/adv/live_std_mean", "grpo/adv/degenerate_abs_max")
    if not any(run.has(k) for k in keys):
        return None
    tol = Tolerances()
    fig, axes = figure(3, height=2.3)
    for ax, key, factor, what, title in (
        (axes[0], keys[0], tol.zero_group_mean, "zero_group_mean",
         "max |group mean of advantages| (0 when centred per group)"),
        (axes[2], keys[2], tol.degenerate_ratio, "degenerate_zero",
         "max |advantage| in degenerate groups (0 unless a stabilizer misbehaves)"),
    ):
        log_panel(ax, run, run.series(key), BLUE, f"{key} (zeros drawn at {LOG_FLOOR:g})",
                  [(factor, RED, f"{what} tolerance: {factor:g} x typical |advantage| (drawn for typical = 1)")])
        finish(ax, run, "", title)
    ax = axes[1]
    line(ax, run, run.series(keys[1]), BLUE, keys[1], "-")
    refs = [1.0]
    reference(ax, 1.0, GREEN, "population z-scores: 1")
    G = group_size(run)
    if G:
        refs.append(math.sqrt((G - 1) / G))
        reference(ax, refs[-1], PURPLE, f"Bessel at G={G}: sqrt((G-1)/G) = {refs[-1]:.3f}")
    fit_ylim(ax, min_span=0.05, extra=refs)
    finish(ax, run, "", "mean std of advantages in live groups (the convention's fingerprint)")
    axes[-1].set_xlabel("step")
    return fig


def group_size(run: RunData) -> int | None:
    """G from the run's settings, else rows per group when one value holds at every step (ledger, or advantages)."""
    for declared in (run.meta.get("group_size"), run.config.get("group_size")):
        if declared_group_size(declared) is not None:
            return declared
    groups = run.series("grpo/sampling/generated_groups")
    rows = run.series("grpo/sampling/generated_responses")
    if groups is None or rows is None:
        groups = run.series("grpo/groups/total")
        rows = np.array([len(h) if h and len(h) < _ADV_SAMPLE else np.nan  # a full sample may be subsampled
                         for h in run.histograms.get("grpo/adv/values", [])], dtype=float)
    if groups is None or len(rows) != len(groups):
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = rows / groups
    ratio = ratio[np.isfinite(ratio)]
    if not ratio.size or not np.allclose(ratio, ratio[0]):
        return None
    return declared_group_size(int(round(ratio[0])))


def estimator_index(run: RunData) -> np.ndarray | None:
    """The estimator at each step as its stable id (``grpo/adv/estimator_id``, in a 0.1 log
    ``grpo/adv/convention_id``; ``ESTIMATOR_IDS``);
    -1 where none fits or the ``convention`` invariant broke (the log then names the declared one), -2 for
    a user-declared estimator; NaN where not logged."""
    ids = run.series("grpo/adv/estimator_id")
    if ids is None or not np.isfinite(ids).any():
        ids = run.series("grpo/adv/convention_id")
    if ids is None or not np.isfinite(ids).any():
        ids = np.array([ESTIMATORS[c].id if c in ESTIMATORS else np.nan for c in run.estimators], dtype=float)
        if not np.isfinite(ids).any():
            return None
    broken = {m.step for m in run.violations if m.invariant == "convention"}
    return np.where(np.isin(run.steps, sorted(broken)), -1.0, ids)


def _id_label(estimator_id: int) -> str:
    if estimator_id == CUSTOM_ID:
        return "your own estimator"
    name = name_of(estimator_id) or f"id {estimator_id}"
    return _CONVENTION_LABELS.get(name, name)


def draw_convention(run: RunData):
    """The estimator identified step by step, the advantage scale it implies, and the fitted stabilizer."""
    ids = estimator_index(run)
    if ids is None and not run.has("grpo/adv/stabilizer"):
        return None
    fig, axes = figure(3, height=2.1)
    ax = axes[0]
    seen = sorted({int(i) for i in ids[np.isfinite(ids)] if i >= 0 or i == CUSTOM_ID}) if ids is not None else []
    shown = seen or list(range(len(CONVENTIONS)))  # the estimators of this run (the classic five when none)
    rows = ["none fits / check broken", *(_id_label(i) for i in shown)]
    if ids is not None:
        pos = np.array([np.nan if not np.isfinite(i) else float(shown.index(int(i))) if int(i) in shown else -1.0
                        for i in ids])
        ax.plot(run.steps, pos, drawstyle="steps-mid", color=BLUE, lw=1.6, marker="o", ms=3.5,
                label="estimator the advantages fit")
    ax.set_yticks(range(-1, len(shown)), rows)
    ax.set_ylim(-1.6, len(shown) - 0.4)
    finish(ax, run, "", "Estimator identified at each step (the advantage function the rows fit)")
    ax = axes[1]
    line(ax, run, run.series("grpo/adv/convention_scale"), BLUE, "grpo/adv/convention_scale (mean k_g * std_g)", "-")
    refs = [1.0]
    reference(ax, 1.0, GREEN, "population: 1 (less with a stabilizer)")
    G = group_size(run)
    if G:
        refs.append(math.sqrt((G - 1) / G))
        reference(ax, refs[-1], PURPLE, f"Bessel at G={G}: {refs[-1]:.3f}")
    fit_ylim(ax, min_span=0.05, extra=refs)
    finish(ax, run, "", "Advantage scale in units of the group's reward std")
    log_panel(axes[2], run, run.series("grpo/adv/stabilizer"), ORANGE,
              f"grpo/adv/stabilizer: fitted epsilon in 1/k = std + epsilon (zeros at {LOG_FLOOR:g})")
    finish(axes[2], run, "", "Stabilizer epsilon fitted to the advantages")
    axes[-1].set_xlabel("step")
    return fig


def draw_overdispersion_stuck(run: RunData):
    """From the per-question history: overdispersion against 0 (iid) and the number of stuck questions."""
    keys = ("grpo/groups/overdispersion", "grpo/sampling/stuck_questions")

    def draw(ax: Any, key: str) -> None:
        if key == keys[0]:
            noisy(ax, run, run.series(key), BLUE, "overdispersion (intra-group correlation)")
            reference(ax, 0.0, GREEN, "iid responses: 0")
            fit_ylim(ax, min_span=0.1, extra=[0.0])
            finish(ax, run, "rho", "Overdispersion of successes within a group, given each question's pooled rate")
        else:
            line(ax, run, run.series(key), ORANGE, "stuck questions", "-")
            fit_ylim(ax, floor=0.0, min_span=2.0, extra=[0.0], integer=True)
            finish(ax, run, "questions", "Questions whose groups have had no reward variation for a while (stuck)")

    return stacked(run, keys, draw, height=2.5)


_KL_AGAINST = {"grpo/kl/k2_mean": "k2 = u^2/2", "grpo/kl/user_mean": "the KL your loss uses"}


def draw_kl(run: RunData):
    """k1 and k3 per token with the exact KL when the demo knows it; below, k2 and the trainer's own KL as their
    difference to k3 (all four nearly coincide on one axis: a small KL makes k2 ~ k3, and most trainers use k3)."""
    keys = [f"grpo/kl/{k}_mean" for k in ("k1", "k2", "k3")]
    if not any(run.has(k) for k in (*keys, "grpo/kl/user_mean")):
        return None
    k3 = run.series(keys[2])
    against = [(key, color, label) for key, color, label in (
        (keys[1], PURPLE, "k2 - k3 (grpo/kl/k2_mean - grpo/kl/k3_mean)"),
        ("grpo/kl/user_mean", GREEN, "your loss's KL - k3 (grpo/kl/user_mean - grpo/kl/k3_mean)"))
        if run.has(key) and k3 is not None]
    fig, axes = figure(2 if against else 1, height=3.0 if against else 3.2)
    ax = axes[0]
    line(ax, run, run.series(keys[0]), ORANGE, keys[0], "-")
    line(ax, run, k3, BLUE, keys[2], "-")
    if k3 is None:  # no k3 to compare with: the trainer's KL on its own
        line(ax, run, run.series("grpo/kl/user_mean"), GREEN, "grpo/kl/user_mean (the KL your loss uses)", "-")
    line(ax, run, run.theory.get("kl_per_token"), "black", "exact KL(policy || reference) per token (demo policy)", ":")
    exact_k3, kl = run.theory.get("k3_per_token"), run.theory.get("kl_per_token")
    if exact_k3 is not None and kl is not None and not np.allclose(exact_k3, kl, equal_nan=True):
        line(ax, run, exact_k3, GREY, "exact E[k3] on the trained responses (dynamic sampling filters them)", "-.")
    reference(ax, 0.0, GREY, None)
    fit_ylim(ax, min_span=1e-3, extra=[0.0])
    finish(ax, run, "KL per token",
           "KL to the reference: k1 = -u, k3 = e^u - u - 1 with u = log(ref/policy)")
    if against and k3 is not None:
        ax = axes[1]
        for key, color, label in against:
            values = run.series(key)
            line(ax, run, None if values is None else values - k3, color, label, "-")
        reference(ax, 0.0, GREY, "0: the same as k3")
        fit_ylim(ax, min_span=1e-6, extra=[0.0])
        named = [_KL_AGAINST[key] for key, _, _ in against]  # the title names what the panel draws
        finish(ax, run, "difference to k3", " and ".join(named) + (", as their difference to k3" if len(named) > 1
                                                                   else ", as its difference to k3"))
    axes[-1].set_xlabel("step")
    return fig


def draw_sampling(run: RunData):
    """Dynamic sampling: responses generated per retained group, against G / alpha."""
    key = "grpo/sampling/responses_per_retained_group"
    if not run.has(key):
        return None
    fig, (ax, ax2) = figure(2, height=2.8)
    noisy(ax, run, run.series(key), BLUE, "observed")
    G = group_size(run)
    iid = run.series("grpo/sampling/degenerate_rate_iid")
    if G and iid is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            line(ax, run, G / (1 - iid), ORANGE, "G / (1 - iid degenerate rate) (monitor)")
    line(ax, run, run.theory.get("responses_per_retained_group"), "black", "G / mean alpha(p_q) (demo policy)", ":")
    fit_ylim(ax, floor=0.0, extra=[0.0])
    finish(ax, run, "responses / retained group", "Responses generated per retained group (failed retries included)")
    noisy(ax2, run, run.series("grpo/sampling/retention_rate"), GREEN, "retention rate")
    percent(ax2)
    finish(ax2, run, "retained / generated", "Retention rate of generated groups")
    ax2.set_xlabel("step")
    return fig


def draw_violations(run: RunData):
    """Every violation on the time axis, one row per invariant."""
    if not run.violations:
        return None
    names = sorted({m.invariant for m in run.violations})
    fig, (ax,) = figure(1, height=max(1.6, 0.45 * len(names) + 1.0))
    for mark in run.violations:
        ax.scatter(mark.step, names.index(mark.invariant), marker="X" if mark.failed else "o",
                   s=80 if mark.failed else 30, color=RED if mark.failed else ORANGE, zorder=3)
    ax.set_yticks(range(len(names)), names)
    set_steps(ax, run)
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.grid(alpha=0.3)
    title = "Violations (X: the breach that stopped the run)" if run.failed_step is not None else "Violations"
    ax.set_title(title, fontsize=10, loc="left")
    ax.set_xlabel("step")
    return fig
