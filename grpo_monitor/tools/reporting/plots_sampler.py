"""The report's sampler-side figure: training-inference mismatch.

It is None when the run logged none of what it draws (no ``sampler_logprobs``); the entropy's and
truncation's figures are declared by their families (:mod:`grpo_monitor.catalog.family_entropy`,
:mod:`grpo_monitor.catalog.family_truncation`).
The mismatch figure draws the run's own error threshold (the config in the run record, else the
default) and the healthy-noise band measured in ``docs/mismatch.md``.
"""

from __future__ import annotations

from .data import RunData
from .plots_core import (
    BLUE,
    GREEN,
    GREY,
    LOG_FLOOR,
    RED,
    figure,
    finish,
    fit_ylim,
    line,
    log_panel,
    reference,
)

#: Healthy numerical noise of grpo/mismatch/k3_mean (nats per token) measured in docs/mismatch.md over 200 steps
#: of a real tiny LM: the float32 KV-cache sampler's median up to the bf16 sampler's maximum.
NOISE_K3 = (8.7e-14, 1.7e-4)


def tolerance(run: RunData, name: str) -> float:
    """``tolerances.<name>`` from the run record's config, else the default (:class:`..config.Tolerances`)."""
    from ...config import Tolerances

    declared = run.config.get("tolerances")
    value = declared.get(name) if isinstance(declared, dict) else None
    return float(value) if isinstance(value, (int, float)) else float(getattr(Tolerances(), name))


def draw_mismatch(run: RunData):
    """Mismatch KL k3 per token (log scale) against the error threshold and the noise band; the mean importance
    weight against 1 and its +-mismatch_ratio_bias band."""
    k3, ratio = run.series("grpo/mismatch/k3_mean"), run.series("grpo/mismatch/ratio_mean")
    if k3 is None and ratio is None:
        return None
    fig, axes = figure(2, height=2.7)
    ax = axes[0]
    threshold = tolerance(run, "mismatch_k3")
    log_panel(ax, run, k3, BLUE, f"grpo/mismatch/k3_mean (zeros drawn at {LOG_FLOOR:g})",
              [(threshold, RED, f"error threshold mismatch_k3 = {threshold:g} nats")])
    lo, hi = NOISE_K3
    ax.axhspan(lo, hi, color=GREEN, alpha=0.18, lw=0, label=f"healthy noise measured: {lo:g} to {hi:g} "
               "(docs/mismatch.md)")
    bottom, top = ax.get_ylim()
    ax.set_ylim(min(bottom, lo / 30), max(top, hi * 30))
    finish(ax, run, "nats per token", "Mismatch KL(sampler || trainer): k3 = e^D - D - 1, D = trainer - sampler")
    ax = axes[1]
    bias = tolerance(run, "mismatch_ratio_bias")
    ax.axhspan(1 - bias, 1 + bias, color=GREEN, alpha=0.18, lw=0, label=f"1 +- mismatch_ratio_bias ({bias:g})")
    line(ax, run, ratio, BLUE, "grpo/mismatch/ratio_mean", "-")
    reference(ax, 1.0, GREY, "E_sampler[rho] = 1")
    fit_ylim(ax, min_span=4 * bias, extra=[1 - bias, 1 + bias])
    finish(ax, run, "weight", "Mean token importance weight rho = exp(D): 1 when the sampler reports what it sampled")
    axes[-1].set_xlabel("step")
    return fig
