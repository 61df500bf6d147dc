"""GSPO's sequence ratio (``grpo/seq_ratio/*``) on every backend against an independent float64 reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_tokens import reference_seq_ratio
from test_tokens_native import run_backend

from grpo_monitor.stats.tokens import backends, combine_token_stats, token_inputs, token_metrics

KEYS = ("mean", "min", "max", "ess", "clip_frac", "tail_frac")
CLIP = (3e-4, 4e-4)  # GSPO's epsilon / epsilon_high in TRL's docs


def batch(kind: str, dtype: torch.dtype, seed: int = 0) -> dict[str, torch.Tensor]:
    """(B, T) mask, logprobs and old_logprobs of one kind, garbage in the padding."""
    gen = torch.Generator().manual_seed(seed)
    B, T = 24, 37
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    scale = {"random": 0.05, "tiny_drift": 2e-4, "huge": 1.0}.get(kind, 0.05)
    lr = scale * torch.randn(B, T, generator=gen, dtype=torch.float64)
    if kind == "one_token_rows":
        lengths[::2] = 1
    if kind == "huge":  # whole rows far off-policy: w from ~1e-13 up to ~1e13
        lr += torch.linspace(-30, 30, B, dtype=torch.float64)[:, None]
    if kind == "empty_rows":
        lengths[3:6] = 0
    mask = torch.arange(T)[None] < lengths[:, None]
    old = -3 * torch.rand(B, T, generator=gen, dtype=torch.float64)
    lp = old + lr
    garbage = [math.nan, math.inf, -1e30][seed % 3]
    x = {"logprobs": torch.where(mask, lp, garbage), "old_logprobs": torch.where(mask, old, garbage)}
    return {"mask": mask.to(torch.float32), **{k: v.to(dtype) for k, v in x.items()}}


def reference(x: dict[str, torch.Tensor]) -> dict[str, float]:
    n = {k: v.double().numpy() for k, v in x.items()}
    with np.errstate(invalid="ignore"):
        got = reference_seq_ratio(n["mask"] > 0, n["logprobs"], n["old_logprobs"], CLIP)
    return {k: float(v) for k, v in got.items()}


def run(backend: str, x: dict[str, torch.Tensor]) -> torch.Tensor:
    return run_backend(backend, token_inputs(**x, clip_range=CLIP))


def assert_seq_close(got: dict[str, float], want: dict[str, float], rtol: float) -> None:
    for k in KEYS:
        key = f"grpo/seq_ratio/{k}"
        assert got[key] == pytest.approx(want[key], rel=rtol, abs=1e-12), key


KINDS = ("random", "tiny_drift", "huge", "one_token_rows", "empty_rows")
BACKENDS = ("eager", "compiled (traced form)", "native")
CASES = [(k, b, d) for k in KINDS for b in BACKENDS for d in (torch.float32, torch.float64)
         if not (b == "native" and d == torch.float64)]


@pytest.mark.parametrize("kind, backend, dtype", CASES, ids=[f"{k}-{b}-{d}".replace("torch.", "") for k, b, d in CASES])
def test_every_key_matches_float64(kind, backend, dtype):
    """mean, min, max, ess, clip_frac and tail_frac equal the float64 per-row computation (float32: to ~1e-5 x |m|)."""
    x = batch(kind, dtype, seed=KINDS.index(kind))
    got = token_metrics(run(backend, x))
    rtol = 1e-10 if dtype == torch.float64 else (5e-5 if kind == "huge" else 1e-5)
    assert_seq_close(got, reference(x), rtol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_micro_batches_merge_exactly(backend):
    """Uneven micro-batches merged slot by slot give the whole batch's keys (sums add, extremes stay extremes)."""
    x = batch("huge", torch.float32, seed=4)
    whole = run(backend, x)
    merged = None
    for a, b in ((0, 1), (1, 10), (10, 24)):
        part = run(backend, {k: v[a:b] for k, v in x.items()})
        merged = part if merged is None else combine_token_stats(merged, part)
    torch.testing.assert_close(merged, whole, rtol=1e-12, atol=0, equal_nan=True)
    assert_seq_close(token_metrics(merged), reference(x), 5e-5)


def test_clip_and_tail_count_rows_not_tokens():
    """Three rows of mean log ratio 0, log 1.5 and log 3 (varying within the row): clip_frac 2/3, tail_frac 1/3."""
    lr = torch.tensor([[0.1, -0.1, 0.0], [math.log(1.5) + 0.5, math.log(1.5) - 0.5, 0.0],
                       [math.log(3.0), math.log(3.0), math.log(3.0)]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1]], dtype=torch.float64)
    m = token_metrics(backends.EAGER.run(token_inputs(mask, logprobs=lr - 1, old_logprobs=torch.full_like(lr, -1.0),
                                                      clip_range=(0.2, 0.2))))
    assert m["grpo/seq_ratio/clip_frac"] == pytest.approx(2 / 3)
    assert m["grpo/seq_ratio/tail_frac"] == pytest.approx(1 / 3)
    assert m["grpo/seq_ratio/min"] == pytest.approx(1.0) and m["grpo/seq_ratio/max"] == pytest.approx(3.0)
    w = np.array([1.0, 1.5, 3.0])
    assert m["grpo/seq_ratio/ess"] == pytest.approx(w.sum() ** 2 / (3 * (w * w).sum()))


def test_absent_without_both_log_probs():
    """logprobs alone, or old_logprobs alone, give no grpo/seq_ratio/* key."""
    x = batch("random", torch.float32)
    for given in ("logprobs", "old_logprobs"):
        m = token_metrics(backends.EAGER.run(token_inputs(x["mask"], **{given: x[given]})))
        assert not any(k.startswith("grpo/seq_ratio/") for k in m)
