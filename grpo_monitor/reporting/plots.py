"""The report's figures: one function per figure, drawn on a fresh matplotlib Figure.

Figures are built with ``matplotlib.figure.Figure`` (Agg canvas, no pyplot state), so
rendering never depends on a display or changes a global backend. Every time-axis panel
marks the run's violations as vertical lines (red: the step that stopped the run).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np

from .data import RunData

_BLUE, _ORANGE, _GREEN, _GREY, _RED, _PURPLE = "#1f77b4", "#ff7f0e", "#2ca02c", "#555555", "#d62728", "#9467bd"
_MARK_COLORS = ("#9467bd", "#e377c2", "#8c564b", "#bcbd22", "#17becf", "#7f7f7f", "#ff9896")  # red: the stopping breach
#: Values at or below this are drawn at the floor of log-scale panels (exact zeros included).
LOG_FLOOR = 1e-17


@dataclasses.dataclass(frozen=True)
class FigureSpec:
    """A figure of the report: file stem, title, caption and the function that draws it."""

    name: str
    title: str
    caption: str
    draw: Callable[[RunData], object | None]


def _figure(rows: int = 1, cols: int = 1, height: float = 3.0):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, height * rows), dpi=100, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def rolling_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Centred moving average ignoring NaN (NaN where the window holds no finite value).

    >>> rolling_mean(np.array([0., 1., np.nan, 3.]), 3).tolist()
    [0.5, 0.5, 2.0, 3.0]
    """
    finite = np.isfinite(values)
    kernel = np.ones(window)
    sums = np.convolve(np.where(finite, values, 0.0), kernel, mode="same")
    counts = np.convolve(finite.astype(float), kernel, mode="same")
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _window(run: RunData) -> int:
    return max(1, (len(run.steps) // 20) | 1)


def _marker(run: RunData) -> dict:
    """Markers on short runs, where a line between few points (or one) would not show."""
    return {"marker": "o", "ms": 4} if len(run.steps) <= 30 else {}


def _noisy(ax, run: RunData, values: np.ndarray, color: str, label: str) -> None:
    """Per-step values faint, their moving average bold."""
    w = _window(run)
    if w > 1:
        ax.plot(run.steps, values, color=color, alpha=0.3, lw=0.8)
    ax.plot(run.steps, rolling_mean(values, w) if w > 1 else values, color=color, lw=2,
            label=f"{label} ({w}-step mean)" if w > 1 else label, **_marker(run))


def _line(ax, run: RunData, values: np.ndarray | None, color: str, label: str, style: str = "--") -> None:
    if values is not None and np.isfinite(values).any():
        ax.plot(run.steps, values, style, color=color, lw=1.6, label=label, **_marker(run))


def mark_violations(ax, run: RunData) -> None:
    """Vertical lines at every violation; one legend entry per invariant."""
    colors: dict[str, str] = {}
    for mark in run.violations:
        first = mark.invariant not in colors
        color = colors.setdefault(mark.invariant, _MARK_COLORS[len(colors) % len(_MARK_COLORS)])
        ax.axvline(mark.step, color=_RED if mark.failed else color, lw=2.2 if mark.failed else 1.0, alpha=0.8,
                   ls="-" if mark.failed else ":", label=f"violation: {mark.invariant}" if first else None)


def _finish(ax, run: RunData, ylabel: str, title: str) -> None:
    from matplotlib.ticker import MaxNLocator

    mark_violations(ax, run)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    lo, hi = float(run.steps[0]), float(run.steps[-1])
    pad = max(1.0, 0.02 * (hi - lo))
    ax.set_xlim(lo - pad, hi + pad)
    ax.set_title(title, fontsize=10, loc="left")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7.5, loc="best", framealpha=0.85)


def _percent(ax) -> None:
    """A rate axis: percent ticks, from 0 to a little above the largest value drawn (at most 100%)."""
    from matplotlib.ticker import PercentFormatter

    drawn = [np.asarray(line.get_ydata(), dtype=float) for line in ax.get_lines()]
    top = max((float(np.nanmax(y)) for y in drawn if np.isfinite(y).any()), default=1.0)
    ax.set_ylim(0.0, min(1.0, top * 1.15 + 0.05))
    ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))


def _smoothed(run: RunData, values: np.ndarray | None) -> np.ndarray | None:
    """The same moving average as the observed series, so the two compare like with like."""
    w = _window(run)
    return rolling_mean(values, w) if values is not None and w > 1 else values


def draw_degenerate(run: RunData):
    """Observed degenerate rate against the iid prediction (and the demo's exact value).

    With dynamic sampling the generated groups come first: the training batch is filtered.
    """
    generated = run.has("grpo/sampling/generated_degenerate_rate")
    if not run.has("grpo/groups/degenerate_rate") and not generated:
        return None
    fig, axes = _figure(2 if generated else 1)
    if generated:
        ax = axes[0]
        _noisy(ax, run, run.series("grpo/sampling/generated_degenerate_rate"), _BLUE, "observed")
        _line(ax, run, _smoothed(run, run.series("grpo/sampling/degenerate_rate_iid")), _ORANGE,
              "iid prediction (monitor, pooled per-question history)")
        _line(ax, run, _smoothed(run, run.theory.get("expected_generated_degenerate_rate")), "black",
              "exact p^G + (1-p)^G from the demo policy", ":")
        _percent(ax)
        _finish(ax, run, "degenerate groups", "Every generated group (dynamic sampling, discarded included)")
    ax = axes[-1]
    if run.has("grpo/groups/degenerate_rate"):
        _noisy(ax, run, run.series("grpo/groups/degenerate_rate"), _BLUE, "observed")
    _line(ax, run, _smoothed(run, run.series("grpo/groups/degenerate_rate_iid")), _ORANGE,
          "iid prediction (monitor, pooled per-question history)")
    title = "Training batch: groups with no reward variation"
    if generated:
        title = "Training batch after filtering (0 by construction; iid: what these questions give unfiltered)"
    else:
        _line(ax, run, _smoothed(run, run.theory.get("expected_degenerate_rate")), "black",
              "exact p^G + (1-p)^G from the demo policy", ":")
    _percent(ax)
    _finish(ax, run, "degenerate groups", title)
    ax.set_xlabel("step")
    return fig


def draw_prompts(run: RunData):
    """Effective prompts (groups with variation) per step, and the mean reward."""
    if not run.has("grpo/groups/effective_prompts"):
        return None
    fig, (ax, ax2) = _figure(2, height=2.6)
    _line(ax, run, run.series("grpo/groups/total"), _GREY, "groups in the training batch", "-")
    _noisy(ax, run, run.series("grpo/groups/effective_prompts"), _GREEN, "effective prompts")
    ax.set_ylim(bottom=0)
    _finish(ax, run, "groups", "Effective prompts: the groups the update is really made of")
    _noisy(ax2, run, run.series("grpo/reward/mean"), _BLUE, "mean reward (training batch)")
    _line(ax2, run, run.theory.get("mean_success_prob"), "black", "mean sigmoid(z_q) over all questions (demo policy)", ":")
    _finish(ax2, run, "reward", "Reward")
    ax2.set_xlabel("step")
    return fig


def question_std_matrix(run: RunData, bins: int = 25, max_columns: int = 60) -> tuple[np.ndarray, list[str]] | None:
    """(fraction of groups per row and column, row labels) of ``grpo/reward/question_std``.

    Consecutive steps are pooled so that there are at most ``max_columns`` columns.
    With at most 12 distinct values (binary rewards, fixed G) each value gets its own row
    (0, the degenerate groups, always at the bottom);
    otherwise the range is cut into ``bins`` equal bins.
    """
    per_step = run.histograms.get("grpo/reward/question_std")
    if not per_step or not any(per_step):
        return None
    finite = [np.asarray([v for v in (h or []) if v is not None and math.isfinite(v)], dtype=float) for h in per_step]
    values = np.concatenate([h for h in finite if h.size]) if any(h.size for h in finite) else np.zeros(0)
    distinct = np.unique(np.concatenate([[0.0], np.round(values, 9)]))  # the degenerate row is always shown
    if 0 < len(distinct) <= 12:
        edges = np.concatenate([[-np.inf], (distinct[1:] + distinct[:-1]) / 2, [np.inf]])
        labels = [f"{v:.3g}" + (" (degenerate)" if v == 0 else "") for v in distinct]
    else:
        top = float(values.max()) if values.size else 1.0
        edges = np.linspace(0.0, max(top, 1e-12) * 1.0001, bins + 1)
        labels = [f"{e:.3g}" for e in edges[:-1]]
    pool = max(1, math.ceil(len(finite) / max_columns))
    columns = [np.concatenate(finite[i:i + pool]) for i in range(0, len(finite), pool)]
    matrix = np.full((len(edges) - 1, len(columns)), np.nan)
    for i, h in enumerate(columns):
        if h.size:
            matrix[:, i] = np.histogram(np.round(h, 9), bins=edges)[0] / h.size
    return matrix, labels


def draw_question_std(run: RunData):
    """Heatmap: how the per-question reward std is distributed, step by step."""
    found = question_std_matrix(run)
    if found is None:
        return None
    matrix, labels = found
    fig, (ax,) = _figure(1, height=max(2.6, 0.32 * len(labels) + 1.4) if len(labels) <= 12 else 3.4)
    x0, x1 = float(run.steps[0]), float(run.steps[-1]) + 1
    image = ax.imshow(matrix, origin="lower", aspect="auto", interpolation="nearest", cmap="viridis",
                      extent=(x0, x1, -0.5, len(labels) - 0.5), vmin=0.0, vmax=1.0)
    fig.colorbar(image, ax=ax, label="fraction of groups", pad=0.01)
    stride = max(1, len(labels) // 12)
    ax.set_yticks(range(0, len(labels), stride), labels[::stride])
    _finish(ax, run, "reward std in a group", "Per-question reward std over time (bottom row: degenerate groups)")
    ax.set_xlim(x0, x1)
    ax.grid(False)
    ax.set_xlabel("step")
    return fig


def draw_advantages(run: RunData):
    """The advantage invariants: zero group mean, unit live std, zero on degenerate groups."""
    keys = ("grpo/adv/group_mean_abs_max", "grpo/adv/live_std_mean", "grpo/adv/degenerate_abs_max")
    if not any(run.has(k) for k in keys):
        return None
    fig, axes = _figure(3, height=2.2)
    for ax, key, title in (
        (axes[0], keys[0], "max |group mean of advantages| (0 when centred per group)"),
        (axes[2], keys[2], "max |advantage| in degenerate groups (0 unless a stabilizer misbehaves)"),
    ):
        values = run.series(key)
        if values is not None:
            ax.semilogy(run.steps, np.clip(np.nan_to_num(values, nan=np.nan), LOG_FLOOR, None), color=_BLUE, lw=1.4,
                        label=f"{key} (zeros drawn at {LOG_FLOOR:g})")
        ax.axhline(1e-3, color=_RED, ls="--", lw=1, label="default tolerance (x typical |advantage|)")
        ax.set_ylim(LOG_FLOOR / 3, 1e2)
        _finish(ax, run, "", title)
    ax = axes[1]
    _line(ax, run, run.series(keys[1]), _BLUE, keys[1], "-")
    G = _group_size(run)
    ax.axhline(1.0, color=_GREEN, ls="--", lw=1, label="population z-scores: 1")
    if G:
        ax.axhline(math.sqrt((G - 1) / G), color=_PURPLE, ls="--", lw=1, label=f"Bessel at G={G}: sqrt((G-1)/G)")
    _finish(ax, run, "", "mean std of advantages in live groups (the convention's fingerprint)")
    axes[-1].set_xlabel("step")
    return fig


def _group_size(run: RunData) -> int | None:
    """G from the run's settings, else from the ledger when every generated group had one size."""
    declared = run.meta.get("group_size")
    if isinstance(declared, int) and declared >= 2:
        return declared
    responses, groups = run.series("grpo/sampling/generated_responses"), run.series("grpo/sampling/generated_groups")
    if responses is None or groups is None:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = responses / groups
    ratio = ratio[np.isfinite(ratio)]
    return int(round(ratio[0])) if ratio.size and np.allclose(ratio, ratio[0]) else None


def draw_kl(run: RunData):
    """The three KL estimators per token, and the exact KL when the demo knows it."""
    keys = [f"grpo/kl/{k}_mean" for k in ("k1", "k2", "k3")]
    if not any(run.has(k) for k in keys):
        return None
    fig, (ax,) = _figure(1, height=3.0)
    for key, color in zip(keys, (_ORANGE, _PURPLE, _BLUE)):
        _line(ax, run, run.series(key), color, key, "-")
    _line(ax, run, run.theory.get("kl_per_token"), "black", "exact KL(policy || reference) per token (demo policy)", ":")
    k3, kl = run.theory.get("k3_per_token"), run.theory.get("kl_per_token")
    if k3 is not None and kl is not None and not np.allclose(k3, kl, equal_nan=True):
        _line(ax, run, k3, _GREY, "exact E[k3] on the trained responses (dynamic sampling filters them)", "-.")
    _finish(ax, run, "KL per token", "KL to the reference: k1 = -u, k2 = u^2/2, k3 = e^u - u - 1 with u = log(ref/policy)")
    ax.set_xlabel("step")
    return fig


def draw_sampling(run: RunData):
    """Dynamic sampling: responses generated per retained group, against G / alpha."""
    key = "grpo/sampling/responses_per_retained_group"
    if not run.has(key):
        return None
    fig, (ax, ax2) = _figure(2, height=2.8)
    _noisy(ax, run, run.series(key), _BLUE, "observed")
    G = _group_size(run)
    iid = run.series("grpo/sampling/degenerate_rate_iid")
    if G and iid is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            _line(ax, run, G / (1 - iid), _ORANGE, "G / (1 - iid degenerate rate) (monitor)")
    _line(ax, run, run.theory.get("responses_per_retained_group"), "black", "G / mean alpha(p_q) (demo policy)", ":")
    ax.set_ylim(bottom=0)
    _finish(ax, run, "responses / retained group", "Responses generated per retained group (failed retries included)")
    _noisy(ax2, run, run.series("grpo/sampling/retention_rate"), _GREEN, "retention rate")
    _percent(ax2)
    ax2.set_ylim(0, 1.02)
    _finish(ax2, run, "retained / generated", "Retention rate of generated groups")
    ax2.set_xlabel("step")
    return fig


def draw_violations(run: RunData):
    """Every violation on the time axis, one row per invariant."""
    if not run.violations:
        return None
    names = sorted({m.invariant for m in run.violations})
    fig, (ax,) = _figure(1, height=max(1.6, 0.45 * len(names) + 1.0))
    for mark in run.violations:
        ax.scatter(mark.step, names.index(mark.invariant), marker="X" if mark.failed else "o",
                   s=80 if mark.failed else 30, color=_RED if mark.failed else _ORANGE, zorder=3)
    ax.set_yticks(range(len(names)), names)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(float(run.steps[0]) - 1, float(run.steps[-1]) + 1)
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.grid(alpha=0.3)
    title = "Violations (X: the breach that stopped the run)" if run.failed_step is not None else "Violations"
    ax.set_title(title, fontsize=10, loc="left")
    ax.set_xlabel("step")
    return fig


FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("violations", "Violations", "Every invariant breach, by step.", draw_violations),
    FigureSpec("degenerate", "Degenerate groups",
               "Share of groups whose rewards are all equal (no gradient from the reward term), against what "
               "independent Bernoulli draws predict: p^G + (1-p)^G per question. It rises as questions saturate.",
               draw_degenerate),
    FigureSpec("prompts", "Effective prompts",
               "Groups with reward variation: the prompts each update is really built from.", draw_prompts),
    FigureSpec("question_std", "Per-question reward std",
               "Distribution of the within-group reward std at each step; mass in the bottom row is wasted generation.",
               draw_question_std),
    FigureSpec("advantages", "Advantage invariants",
               "Group mean of advantages and their value on degenerate groups should sit at rounding level, far "
               "below the tolerance; the live std identifies the std convention.", draw_advantages),
    FigureSpec("kl", "KL estimators",
               "k1 is unbiased but noisy and can go negative, k2 is biased, k3 is unbiased and non-negative.",
               draw_kl),
    FigureSpec("sampling", "Dynamic sampling ledger",
               "Responses generated per retained group against G / alpha with alpha = 1 - p^G - (1-p)^G.",
               draw_sampling),
)
