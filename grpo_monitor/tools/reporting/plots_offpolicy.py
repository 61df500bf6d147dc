"""The report's sequence-ratio figure, with its caption: GSPO's sequence ratio against its clip band (issue 34;
docs/async_moe.md). The rows' ages and MoE routing are their families' declared figures (:mod:`.declared`).

The draw function returns None when the run logged none of what it draws (no ``old_logprobs``).
"""

from __future__ import annotations

import numpy as np

from .data import RunData
from .declared import histogram_matrix
from .facts import change, peak, sentences
from .plots_core import BLUE, GREEN, GREY, ORANGE, RED, figure, finish, fit_ylim, line, percent, reference


def draw_seq_ratio(run: RunData):
    """GSPO's sequence ratio w per step: min to max (band) and mean, against the clip band; clip and tail shares."""
    mean, lo, hi = (run.series(f"grpo/seq_ratio/{s}") for s in ("mean", "min", "max"))
    if mean is None or not sequence_level(run):
        return None
    low, high = _clip(run)
    fig, axes = figure(2, height=2.7)
    ax = axes[0]
    ax.axhspan(1 - low, 1 + high, color=GREEN, alpha=0.25, lw=0, label=f"clip band [1-{low:g}, 1+{high:g}]")
    line(ax, run, hi, RED, "largest row (grpo/seq_ratio/max)", "--")
    line(ax, run, mean, BLUE, "mean over rows (grpo/seq_ratio/mean)", "-")
    line(ax, run, lo, ORANGE, "smallest row (grpo/seq_ratio/min)", "--")
    reference(ax, 1.0, GREY, None)
    extra = [v for s in (lo, hi) if s is not None for v in s[np.isfinite(s)]]
    fit_ylim(ax, min_span=4 * max(low, high), extra=[1 - low, 1 + high, *extra])
    finish(ax, run, "w", "Sequence ratio w = exp(mean log ratio of a row) against the clip band")
    ax = axes[1]
    line(ax, run, run.series("grpo/seq_ratio/clip_frac"), ORANGE, "rows outside the clip band (clip_frac)", "-")
    line(ax, run, run.series("grpo/seq_ratio/tail_frac"), RED, "rows outside the mismatch band (tail_frac)", "--")
    line(ax, run, run.series("grpo/seq_ratio/ess"), GREEN, "effective sample size (ess)", ":")
    percent(ax)
    finish(ax, run, "share of rows", "Clipped and far off-policy rows, and the ratios' effective sample size")
    axes[-1].set_xlabel("step")
    return fig


def sequence_level(run: RunData) -> bool:
    """Whether the run's loss clips the sequence ratio (GSPO): the integration's settings say so."""
    settings = run.settings
    return settings.get("importance_sampling_level") == "sequence" or settings.get("loss_mode") == "gspo"


def _clip(run: RunData) -> tuple[float, float]:
    value = run.config.get("clip_range")
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        return float(value[0]), float(value[1])
    return 0.2, 0.2


def layer_matrix(run: RunData) -> np.ndarray | None:
    """Agreement per (layer, step) from ``grpo/moe/agreement_by_layer``: the MoE family's heat map's matrix."""
    return histogram_matrix(run, "grpo/moe/agreement_by_layer")


# ------------------------------------------------------------------------------------------------ captions
def seq_ratio_caption(run: RunData) -> str:
    low, high = _clip(run)
    parts = [f"GSPO's sequence ratio w per row (exp of the row's mean log ratio logprobs - old_logprobs) against the "
             f"clip band [1-{low:g}, 1+{high:g}] of this run's config",
             change(run.steps, "the mean ratio", run.series("grpo/seq_ratio/mean"), "{:.4f}", "grpo/seq_ratio/mean"),
             peak(run, "the share of rows outside the clip band", run.series("grpo/seq_ratio/clip_frac"), "{:.1%}")]
    return sentences(parts)
