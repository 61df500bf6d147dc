"""The report's token-side figures, from ``observe_loss``: importance ratio and clipping, response length.

Each function returns None when the run logged none of what it draws (no token tensors,
or no ``old_logprobs`` for the ratio).
"""

from __future__ import annotations

from typing import Any

from .data import RunData
from .plots_core import (
    BLUE,
    GREEN,
    LOG_FLOOR,
    ORANGE,
    RED,
    finish,
    fit_ylim,
    line,
    log_panel,
    noisy,
    percent,
    reference,
    stacked,
)


def draw_ratio(run: RunData):
    """Mean importance ratio against 1, the share of clipped tokens, and the largest |log ratio|."""
    from ...config import Tolerances

    keys = ("grpo/ratio/mean", "grpo/ratio/clip_frac", "grpo/ratio/log_abs_max")
    on_policy = Tolerances().on_policy  # max |logprobs - old_logprobs| in nats on a first inner epoch

    def draw(ax: Any, key: str) -> None:
        values = run.series(key)
        if key == keys[0]:
            line(ax, run, values, BLUE, "mean ratio pi / pi_old over valid tokens", "-")
            reference(ax, 1.0, GREEN, "on-policy: 1")
            fit_ylim(ax, min_span=0.02, extra=[1.0])
            finish(ax, run, "ratio", "Importance ratio pi_theta / pi_old (mean over valid tokens)")
        elif key == keys[1]:
            noisy(ax, run, values, ORANGE, "clipped tokens")
            percent(ax)
            finish(ax, run, "tokens clipped", "Clip fraction: tokens whose ratio is outside [1 - low, 1 + high]")
        else:
            log_panel(ax, run, values, BLUE, f"max |log pi - log pi_old| (zeros drawn at {LOG_FLOOR:g})",
                      [(on_policy, RED, f"on_policy tolerance {on_policy:g} nats (first inner epoch)")])
            finish(ax, run, "nats", "Largest |log ratio| of a valid token")

    return stacked(run, keys, draw, height=2.3)


def draw_tokens(run: RunData):
    """Mean response length in valid tokens, and the share of valid tokens carrying a non-zero advantage."""
    keys = ("grpo/tokens/response_length_mean", "grpo/tokens/live_fraction")

    def draw(ax: Any, key: str) -> None:
        if key == keys[0]:
            noisy(ax, run, run.series(key), BLUE, "mean response length (valid tokens per response)")
            fit_ylim(ax, floor=0.0, extra=[0.0])
            finish(ax, run, "tokens", "Response length (tokens with mask 1)")
        else:
            noisy(ax, run, run.series(key), GREEN, "live tokens (advantage != 0)")
            percent(ax)
            finish(ax, run, "share of valid tokens", "Live-token fraction: valid tokens with a non-zero advantage")

    return stacked(run, keys, draw, height=2.5)


def _pooled(run: RunData, key: str) -> list[list[float]]:
    return [h for h in run.histograms.get(key, []) if h]


def _plain_log_ticks(ax) -> None:
    """Log axes labelled with plain numbers (``4``, ``0.5``), minor ticks too on a narrow range, not ``4x10^0``."""
    from matplotlib.ticker import LogFormatter

    class Plain(LogFormatter):
        def __call__(self, x, pos=None):  # the ticks LogFormatter labels, written as plain numbers
            return f"{x:g}" if super().__call__(x, pos) else ""

    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(Plain())
        axis.set_minor_formatter(Plain(labelOnlyBase=False, minor_thresholds=(1.2, 0.6)))


def _expected_slopes(run: RunData) -> list[tuple[str, float, str, str]]:
    """(label, slope, colour, style) of the lines to draw: the declared aggregation's expectation (the run
    record's ``loss_aggregation``) and the fitted one (the last ``aggregation_id``) when it differs."""
    import numpy as np

    from ...stats.aggregations import AGGREGATIONS, resolve

    def slope(name: str) -> float:
        return 0.0 if AGGREGATIONS[name].per_length else 1.0

    out = []
    declared = run.config.get("loss_aggregation")
    try:
        name = resolve(declared)[0] if isinstance(declared, str) and declared != "auto" else None
    except ValueError:  # a log written by a version with other names
        name = None
    if name is not None:
        alias = f" ({name})" if declared != name else ""
        out.append((f"declared {declared}{alias}: weight ~ length^{slope(name):g}", slope(name), RED, "-"))
    ids = run.series("grpo/weights/aggregation_id")
    index = int(ids[np.isfinite(ids)][-1]) if ids is not None and np.isfinite(ids).any() else -1
    fitted = next((a.name for a in AGGREGATIONS.values() if a.index == index), None)
    if fitted is not None and (name is None or slope(fitted) != slope(name)):
        out.append((f"fitted {fitted}: weight ~ length^{slope(fitted):g}", slope(fitted), ORANGE, "--"))
    return out


def draw_weights(run: RunData):
    """Weight per unit |advantage| against response length (log-log, every step pooled) with the slope the
    declared aggregation predicts (and the fitted one's when it differs), and the per-question shares."""
    import numpy as np

    lengths, weights = _pooled(run, "grpo/weights/response_length"), _pooled(run, "grpo/weights/response_weight")
    if not lengths:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 3.2), dpi=100, layout="constrained")
    left, right = fig.subplots(1, 2)
    x = np.concatenate([np.asarray(v, float) for v in lengths])
    y = np.concatenate([np.asarray(v, float) for v in weights])
    left.scatter(x, y, s=8, color=BLUE, alpha=0.5, label="responses (all steps)")
    if len(x) > 1:
        grid = np.geomspace(x.min(), x.max(), 20)
        for label, slope, colour, style in _expected_slopes(run):
            scale = np.exp(np.mean(np.log(y)) - slope * np.mean(np.log(x)))
            left.plot(grid, scale * grid ** slope, color=colour, linestyle=style, label=label)
    left.set_xscale("log")
    left.set_yscale("log")
    _plain_log_ticks(left)
    centre = float(np.exp(np.mean(np.log(y))))
    left.set_ylim(min(y.min(), centre) / 4, max(y.max(), centre) * 4)  # float noise on a flat line stays flat
    left.set_xlabel("response length (valid tokens)")
    left.set_ylabel("|weight| / |advantage| (mean 1)")
    left.set_title("Weight against response length", fontsize=10)
    left.legend(fontsize=8)
    _draw_question_shares(right, _pooled(run, "grpo/weights/question_share"))
    return fig


def _draw_question_shares(ax: Any, shares: list[list[float]]) -> None:
    """Histogram of every step's per-question shares of |weight|, with the equal share marked."""
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    if shares:
        pooled = np.concatenate([np.asarray(v, float) for v in shares])
        counts, _, _ = ax.hist(pooled, bins=30, color=GREEN, alpha=0.8)
        even = 1.0 / np.median([len(v) for v in shares])
        ax.axvline(even, color=ORANGE, label=f"equal shares: {even:.3g}")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # a count of questions
        ax.set_ylim(0, max(1.0, float(np.max(counts))) * 1.3)  # headroom: the legend covers no bar
        ax.legend(fontsize=8, loc="upper right")
    ax.set_xlabel("a question's share of the step's |weight|")
    ax.set_ylabel("questions (all steps)")
    ax.set_title("Per-question weight", fontsize=10)
