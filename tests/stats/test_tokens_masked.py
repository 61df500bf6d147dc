"""grpo/mismatch/masked_frac and masked_ess: TRL's token_mask and sequence_mask against float64, on every backend."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_tokens_native import run_backend

from grpo_monitor.stats.tokens import combine_token_stats, token_inputs, token_metrics

BAND = (0.25, 3.0)


def batch(seed: int, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Ragged rows (an empty one, one-token ones), mismatch noise with heavy tails, NaN in the padding;
    token and row log-weights kept 1e-3 away from the band edges (float32 and float64 round differently)."""
    g = torch.Generator().manual_seed(seed)
    B, T = 16, 29
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0], lengths[1], lengths[2] = 0, 1, 1
    mask = torch.arange(T)[None] < lengths[:, None]
    d = 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64) ** 3
    d = torch.where(mask, d, 0.0)
    for edge in (math.log(BAND[0]), math.log(BAND[1])):
        d = torch.where((d - edge).abs() < 1e-3, d + 3e-3, d)
        row = d.sum(1, keepdim=True)
        d[:, :1] = torch.where((row - edge).abs() < 1e-3, d[:, :1] + 3e-3, d[:, :1])
    sampler = -2 * torch.rand(B, T, generator=g, dtype=torch.float64)
    x = {"sampler_logprobs": sampler, "old_logprobs": sampler + d}
    return {"mask": mask.float(), **{k: torch.where(mask, v, math.nan).to(dtype) for k, v in x.items()}}


def trl_reference(x: dict[str, torch.Tensor], level: str) -> dict[str, float]:
    """TRL's _generate_and_score_completions in float64: ratio exp(d) per token or exp(sum d) per row, zeroed
    outside [clip_min, clip_max]; masked share and the ESS of what is left (n = every valid token or row)."""
    m = x["mask"].double().numpy() > 0
    d = np.where(m, x["old_logprobs"].double().numpy() - x["sampler_logprobs"].double().numpy(), 0.0)
    w = np.exp(d[m]) if level == "token" else np.exp(d.sum(1)[m.any(1)])
    masked = (w < BAND[0]) | (w > BAND[1])
    kept = np.where(masked, 0.0, w)
    return {"grpo/mismatch/masked_frac": masked.mean(),
            "grpo/mismatch/masked_ess": kept.sum() ** 2 / (kept.size * (kept * kept).sum())}


def run(backend: str, x: dict[str, torch.Tensor]) -> torch.Tensor:
    return run_backend(backend, token_inputs(**x, mismatch_band=BAND))


CASES = [(level, backend, seed) for level in ("token", "sequence")
         for backend in ("eager", "compiled (traced form)", "native") for seed in (0, 1, 2)]


@pytest.mark.parametrize("level, backend, seed", CASES, ids=[f"{lv}-{b}-seed{s}" for lv, b, s in CASES])
def test_masked_share_and_ess_match_trl_in_float64(level, backend, seed):
    """Both keys equal TRL's masking recomputed in float64, whole and merged over uneven micro-batches."""
    x = batch(seed)
    want = trl_reference(x, level)
    assert 0 < want["grpo/mismatch/masked_frac"] < 1
    whole = run(backend, x)
    merged = None
    for a, b in ((0, 3), (3, 4), (4, 16)):
        part = run(backend, {k: v[a:b] for k, v in x.items()})
        merged = part if merged is None else combine_token_stats(merged, part)
    for vec in (whole, merged):
        got = token_metrics(vec, mismatch_mask=level)
        for key, value in want.items():
            assert got[key] == pytest.approx(float(value), rel=2e-5, abs=1e-9), key


def test_no_key_without_a_declared_mask_and_a_worded_error_for_another():
    """Undeclared: no masked key (a fraction of nothing the trainer does); an unknown level is named."""
    vec = run("eager", batch(0))
    assert not any(k.startswith("grpo/mismatch/masked") for k in token_metrics(vec))
    with pytest.raises(ValueError, match="mismatch_mask must be 'token', 'sequence' or None, but got 'row'"):
        token_metrics(vec, mismatch_mask="row")
