"""The report's off-policy figures, with their captions: the rows' ages with the staleness drop's bias, GSPO's sequence
ratio against its clip band, and MoE routing agreement per layer (issue 34; docs/async_moe.md).

Each draw function returns None when the run logged none of what it draws (no ``policy_version``,
no ``old_logprobs``, no routed experts).
"""

from __future__ import annotations

import numpy as np

from .data import RunData
from .facts import change, peak, sentences
from .plots_core import BLUE, GREEN, GREY, ORANGE, RED, figure, finish, fit_ylim, line, percent, reference

_AGES = (("0", "#2ca02c"), ("1", "#1f77b4"), ("2", "#ff7f0e"), ("3plus", "#d62728"))
#: |z| above which one step's drop counts as biased (``grpo_monitor.stats.drop_bias.Z_FLAG``).
_Z_FLAG = 3.5


def _any(run: RunData, *keys: str) -> bool:
    return any(run.has(k) for k in keys)


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
    """Agreement per (layer, step) from ``grpo/moe/agreement_by_layer`` (NaN where a step has none)."""
    rows = run.histograms.get("grpo/moe/agreement_by_layer") or []
    width = max((len(r) for r in rows if r), default=0)
    if not width:
        return None
    out = np.full((width, len(rows)), np.nan)
    for j, r in enumerate(rows):
        if r:
            out[:len(r), j] = r
    return out


def draw_routing(run: RunData):
    """Routing agreement, top-k overlap and the worst layer over steps; agreement per layer and step."""
    if not _any(run, "grpo/moe/agreement", "grpo/moe/replay_fallback_frac"):
        return None
    matrix = layer_matrix(run)
    fig, axes = figure(2 if matrix is not None else 1, height=2.8)
    ax = axes[0]
    line(ax, run, run.series("grpo/moe/agreement"), BLUE, "same expert set (agreement)", "-")
    line(ax, run, run.series("grpo/moe/topk_overlap"), GREEN, "shared experts / k (topk_overlap)", "--")
    line(ax, run, run.series("grpo/moe/agreement_layer_min"), RED, "worst layer (agreement_layer_min)", ":")
    line(ax, run, run.series("grpo/moe/replay_fallback_frac"), ORANGE, "engine route missing (fallback)", "-.")
    percent(ax)
    finish(ax, run, "share of (token, layer) pairs", "MoE routing: trainer vs inference engine")
    if matrix is not None:
        ax = axes[1]
        steps = run.steps.astype(float)
        x0, x1 = (steps[0] - 0.5, steps[-1] + 0.5) if len(steps) else (0, 1)
        image = ax.imshow(matrix, aspect="auto", origin="lower", cmap="viridis", vmin=float(np.nanmin(matrix)),
                          vmax=1.0, extent=(x0, x1, -0.5, matrix.shape[0] - 0.5), interpolation="nearest")
        fig.colorbar(image, ax=ax, label="agreement")
        ax.set_ylabel("MoE layer")
        ax.set_title("Agreement per layer (grpo/moe/agreement_by_layer)", fontsize=10)
    axes[-1].set_xlabel("step")
    return fig


# ------------------------------------------------------------------------------------------------ captions
def seq_ratio_caption(run: RunData) -> str:
    low, high = _clip(run)
    parts = [f"GSPO's sequence ratio w per row (exp of the row's mean log ratio logprobs - old_logprobs) against the "
             f"clip band [1-{low:g}, 1+{high:g}] of this run's config",
             change(run.steps, "the mean ratio", run.series("grpo/seq_ratio/mean"), "{:.4f}", "grpo/seq_ratio/mean"),
             peak(run, "the share of rows outside the clip band", run.series("grpo/seq_ratio/clip_frac"), "{:.1%}")]
    return sentences(parts)


def routing_caption(run: RunData) -> str:
    parts = ["Share of (token, MoE layer) pairs where the trainer and the inference engine chose the same expert "
             "set; numerical noise alone (bf16 against float32) keeps it at 95-98% on the tiny MoEs of "
             "docs/async_moe.md, and the routing_disagreement finding opens when it falls well below its start",
             change(run.steps, "the agreement", run.series("grpo/moe/agreement"), "{:.2%}", "grpo/moe/agreement"),
             peak(run, "the share of missing engine routes", run.series("grpo/moe/replay_fallback_frac"),
                  "{:.2%}")]
    return sentences(parts)
