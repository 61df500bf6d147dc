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
