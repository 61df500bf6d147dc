"""The token input ``is_weights`` (the trainer's importance-sampling correction weights): every backend against float64.

The reference is numpy in float64 over the valid tokens (mean, min, max, NaN propagating as torch's
amin / amax do); the weights come from the trainers' own recipes: TRL's truncated importance
sampling (``exp(old - sampler)`` clamped at ``vllm_importance_sampling_clip_max``) and verl's
``compute_rollout_correction_weights`` itself where verl is installed. Adding the input must leave
every other slot of the vector bit for bit as it was.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from test_tokens_native import HAVE_NATIVE, run_backend

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.stats.tokens import (
    TOKEN_INDEX,
    backends,
    combine_token_stats,
    token_inputs,
    token_metrics,
    token_sufficient_stats,
)

SLOTS = ("is_tokens", "is_sum", "is_min", "is_max")
KEYS = ("grpo/mismatch/is_weight_mean", "grpo/mismatch/is_weight_min", "grpo/mismatch/is_weight_max")
BACKENDS = ["eager", "compiled (traced form)", "native"]
CAP = 2.0  # TRL's vllm_importance_sampling_clip_max default (formerly vllm_importance_sampling_cap)


def batch(seed: int, B: int = 9, T: int = 301, garbage: float = math.nan, scale: float = 0.3) -> dict:
    """Ragged rows (an empty one, single-token ones), sampler and trainer log-probs a Student-t mismatch apart, and
    TRL's token_truncate weights exp(old - sampler) capped at CAP; garbage in the padding of every tensor."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, T + 1, (B,), generator=g)
    lens[0], lens[1] = 0, 1
    mask = (torch.arange(T)[None] < lens[:, None]).float()
    sampler = -4 * torch.rand(B, T, generator=g, dtype=torch.float64)
    chi2 = (torch.randn(3, B, T, generator=g, dtype=torch.float64) ** 2).sum(0)
    old = sampler + scale * torch.randn(B, T, generator=g, dtype=torch.float64) / (chi2 / 3).sqrt()
    x = {"mask": mask, "sampler_logprobs": sampler, "old_logprobs": old, "logprobs": old + 0.01,
         "is_weights": torch.clamp(torch.exp(old - sampler), max=CAP)}
    return {k: v if k == "mask" else torch.where(mask > 0, v, garbage).float() for k, v in x.items()}


def reference(mask: torch.Tensor, w: torch.Tensor) -> dict[str, float]:
    """The slots by definition: valid-token count, float64 sum, NaN-propagating min and max."""
    valid = mask.double().numpy() > 0
    v = w.double().numpy()[valid]
    nan = bool(np.isnan(v).any())
    return {"is_tokens": float(v.size), "is_sum": float(v.sum()),
            "is_min": math.nan if nan else float(v.min()) if v.size else math.inf,
            "is_max": math.nan if nan else float(v.max()) if v.size else -math.inf}


def assert_slots(vec: torch.Tensor, want: dict[str, float], who: str) -> None:
    """Counts and extrema exactly (NaN where the reference is), the sum to float32 accumulation."""
    for name in SLOTS:
        got, exp = vec[TOKEN_INDEX[name]].item(), want[name]
        if name == "is_sum" and math.isfinite(exp):
            assert got == pytest.approx(exp, rel=2e-6, abs=1e-9), f"{who}: {name} = {got}, expected {exp}"
        else:
            assert got == exp or (math.isnan(got) and math.isnan(exp)), f"{who}: {name} = {got}, expected {exp}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("combo", ["alone", "with-sampler-and-ratio", "with-adv-kl-entropy"])
def test_every_backend_gives_the_float64_slots_and_leaves_the_others_unchanged(backend, combo):
    """The four slots equal the float64 reference; every other slot equals the pass without is_weights, bit for bit."""
    x = batch(3 + len(combo))
    if combo == "alone":
        x = {"mask": x["mask"], "is_weights": x["is_weights"]}
    elif combo == "with-adv-kl-entropy":
        g = torch.Generator().manual_seed(5)
        x.update(advantages=torch.randn(9, generator=g), kl=torch.rand(9, 301, generator=g),
                 ref_logprobs=x["logprobs"] - 0.1, entropy=2 * torch.rand(9, 301, generator=g))
    got = run_backend(backend, token_inputs(**x))
    assert_slots(got, reference(x["mask"], x["is_weights"]), backend)
    without = run_backend(backend, token_inputs(**{k: v for k, v in x.items() if k != "is_weights"}))
    others = [i for n, i in TOKEN_INDEX.items() if n not in SLOTS]
    torch.testing.assert_close(got[others], without[others], rtol=0, atol=0, equal_nan=True)
    assert without[[TOKEN_INDEX[n] for n in SLOTS]].tolist() == [0.0, 0.0, math.inf, -math.inf]  # the identities


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 3e38], ids=["nan", "inf", "-inf", "huge"])
def test_a_non_finite_weight_on_a_valid_token(backend, value):
    """NaN makes min and max NaN (torch's amin / amax), +-inf and 3e38 are the extremes; the C kernel recounts such a
    row exactly. Off the mask the same values change nothing (the garbage of ``batch``)."""
    x = batch(11, garbage=value)
    x["is_weights"][4, 0] = value
    x["is_weights"][6, 0] = 3e38 if value == 3e38 else x["is_weights"][6, 0]
    got = run_backend(backend, token_inputs(**x))
    want = reference(x["mask"], x["is_weights"])
    assert_slots(got, want, backend)


def test_micro_batches_and_ranks_merge_to_one_pass():
    """Three micro-batches merged slot by slot (sum, min, max) give the metrics of the whole batch in float64."""
    x = batch(21, B=12)
    parts = [token_sufficient_stats(**{k: v[i:i + 4] for k, v in x.items()}) for i in (0, 4, 8)]
    merged = combine_token_stats(combine_token_stats(parts[0], parts[1]), parts[2])
    got = token_metrics(merged)
    v = x["is_weights"].double()[x["mask"] > 0]
    want = {KEYS[0]: v.mean().item(), KEYS[1]: v.min().item(), KEYS[2]: v.max().item()}
    assert got[KEYS[0]] == pytest.approx(want[KEYS[0]], rel=1e-6)
    assert (got[KEYS[1]], got[KEYS[2]]) == (want[KEYS[1]], want[KEYS[2]])
    assert want[KEYS[2]] == CAP  # the batch reaches TRL's truncation cap


def test_the_monitor_reports_the_keys_only_with_the_input():
    """observe_loss(is_weights=) puts the three keys in the step's report (float64 reference); without it, none."""
    x = batch(31, scale=0.005)  # bf16-sized noise: no mismatch violation
    mon = GRPOMonitor(MonitorConfig())
    mon.observe_loss(**x)
    metrics = mon.end_step().metrics
    v = x["is_weights"].double()[x["mask"] > 0]
    assert metrics[KEYS[0]] == pytest.approx(v.mean().item(), rel=1e-6)
    assert (metrics[KEYS[1]], metrics[KEYS[2]]) == (v.min().item(), v.max().item())
    mon.observe_loss(**{k: t for k, t in x.items() if k != "is_weights"})
    assert not set(KEYS) & set(mon.end_step().metrics)


@pytest.mark.parametrize("threshold", ["2.0", "0.5_2.0"], ids=["truncated", "icepop-masked"])
def test_verl_rollout_is_weights(threshold):
    """verl's own compute_rollout_correction_weights: the monitor's mean is verl's rollout_is_mean (its masked mean of
    the weights it applies), and the extremes are the float64 ones of those weights."""
    helper = pytest.importorskip("verl.trainer.ppo.rollout_corr_helper")
    x = batch(41, garbage=0.0)
    log_ratio = (x["old_logprobs"] - x["sampler_logprobs"]) * x["mask"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        weights, verl_metrics = helper.compute_rollout_correction_weights(log_ratio, x["mask"], rollout_is="token",
                                                                          rollout_is_threshold=threshold)
    vec = token_sufficient_stats(x["mask"], is_weights=weights, compile=True)
    got = token_metrics(vec)
    assert got[KEYS[0]] == pytest.approx(verl_metrics["rollout_is_mean"], rel=1e-6)
    assert_slots(vec, reference(x["mask"], weights), "selected backend")
    assert got[KEYS[2]] <= 2.0 and (got[KEYS[1]] == 0.0) == (threshold == "0.5_2.0")


def test_the_native_kernel_serves_is_weights():
    """With the C kernel available, CPU float32 inputs carrying is_weights go to it (not a slower fallback)."""
    if not HAVE_NATIVE:
        pytest.skip("no AVX2 CPU or C compiler")
    x = token_inputs(**batch(51))
    assert backends.select_backend(x, compile=True) is backends.NATIVE


@pytest.mark.slow  # one inductor build: ~5 s on 2 cores
@pytest.mark.timeout(600)
def test_the_compiled_backend_itself(monkeypatch):
    """Through inductor (not only the traced form): the float64 slots, no silent fallback to eager."""
    pytest.importorskip("torch._inductor")
    monkeypatch.setattr(backends.COMPILED, "broken", False)
    x = batch(61)
    x = {k: x[k] for k in ("mask", "logprobs", "old_logprobs", "is_weights")}
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = backends.COMPILED.run(token_inputs(**x))
    assert_slots(got, reference(x["mask"], x["is_weights"]), "compiled")
