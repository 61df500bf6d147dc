"""grpo/mismatch/* and grpo/entropy/* from the fused token pass against the float64 numpy reference.

The reference (``tests/sampler_references.py``) selects the valid tokens and computes every
key from its definition; here the pass runs eagerly, in its compiled form op by op, and
through inductor (slow), on random and adversarial batches and across micro-batches. The C
kernel's sampler slots are checked in ``test_tokens_native_sampler.py``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.stats.tokens import backends, combine_token_stats, token_metrics, token_sufficient_stats
from grpo_monitor.stats.tokens.arguments import token_inputs
from grpo_monitor.stats.tokens.table import HIST_EDGES
from grpo_monitor.stats.tokens.torch_rows import token_vector
from sampler_references import EDGES, mismatch_reference

SAMPLER_KEYS = ("grpo/mismatch/", "grpo/entropy/")


def sampler_metrics(vec: torch.Tensor) -> dict[str, float]:
    return {k: v for k, v in token_metrics(vec).items() if k.startswith(SAMPLER_KEYS)}


def assert_close(got: dict, want: dict, rtol: float) -> None:
    assert set(got) == set(want), f"keys differ: extra {set(got) - set(want)}, missing {set(want) - set(got)}"
    for key, value in want.items():
        g = got[key]
        ok = g == value or (math.isnan(g) and math.isnan(value)) or abs(g - value) <= rtol * abs(value) + 1e-12
        assert ok, f"{key}: got {g!r}, want {value!r}"


def batch(seed: int, B: int = 12, T: int = 37, scale: float = 0.05, dtype=torch.float64, garbage=math.nan) -> dict:
    """A batch with ragged rows, one empty row, heavy-ish tails and garbage in the padding."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(0, T + 1, (B,), generator=g)
    lens[0] = 0
    mask = (torch.arange(T)[None] < lens[:, None]).float()
    sampler = -torch.rand(B, T, generator=g, dtype=torch.float64) * 4
    # Student-t with 3 degrees of freedom from the batch's own generator (z / sqrt(chi2_3 / 3)): the same batch
    # whatever ran before (StudentT.sample draws from the global generator)
    z, chi = torch.randn(4, B, T, generator=g, dtype=torch.float64).split([1, 3])
    noise = z[0] / (chi.square().sum(0) / 3).sqrt() * scale
    old = sampler + noise
    entropy = torch.rand(B, T, generator=g, dtype=torch.float64) * 2
    entropy[1, :5] = 0.0
    out = dict(mask=mask, sampler_logprobs=sampler, old_logprobs=old, logprobs=old + 0.01, entropy=entropy)
    for k in ("sampler_logprobs", "old_logprobs", "logprobs", "entropy"):
        out[k] = torch.where(mask > 0, out[k], garbage).to(dtype)
    return out


def reference(x: dict, use_old: bool = True, **kw) -> dict[str, float]:
    np_ = {k: v.double().numpy() for k, v in x.items()}
    return mismatch_reference(np_["mask"], np_["sampler_logprobs"], old=np_.get("old_logprobs") if use_old else None,
                              logprobs=np_.get("logprobs"), entropy=np_.get("entropy"), **kw)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("form", ["eager", "compiled-traced"])
def test_every_key_matches_float64_on_random_batches(seed, form):
    """Float64 inputs: every mismatch and entropy key equals the reference to rounding."""
    x = batch(seed, scale=[0.01, 0.05, 0.3, 1.0][seed])
    inputs = token_inputs(**x)
    vec = backends.EAGER.run(inputs) if form == "eager" else token_vector(inputs, fast=True)
    assert_close(sampler_metrics(vec), reference(x), 1e-9)


@pytest.mark.parametrize("scale", [0.003, 0.05, 0.5])
def test_float32_inputs_match_to_float32_precision(scale):
    """Float32 inputs (the usual dtype): float32 row sums, float64 across rows, within 1e-4 relative."""
    x = batch(7, B=64, T=200, scale=scale, dtype=torch.float32)
    ref = reference(x)
    for form in ("eager", "compiled-traced"):
        inputs = token_inputs(**x)
        vec = backends.EAGER.run(inputs) if form == "eager" else token_vector(inputs, fast=True)
        got = sampler_metrics(vec)
        got_p99, ref_p99 = got.pop("grpo/mismatch/abs_diff_p99"), ref.pop("grpo/mismatch/abs_diff_p99")
        assert_close(got, ref, 1e-4)
        assert got_p99 == pytest.approx(ref_p99, rel=0.26)  # float32 rounding may move a value across an edge
        ref["grpo/mismatch/abs_diff_p99"] = ref_p99


def test_histogram_edges_are_the_documented_ones():
    """Four bins per octave at 1, 1.25, 1.5, 1.75 x 2^e, 2^-16 .. 2^6, exactly representable in float32."""
    assert np.array_equal(np.array(HIST_EDGES), EDGES)
    assert all(float(np.float32(e)) == e for e in HIST_EDGES)


@pytest.mark.parametrize("case", ["identical", "on_edges", "huge", "one_token", "band_and_threshold", "inf_garbage"])
def test_adversarial_batches(case):
    """Exact agreement, exact zeros, values on histogram edges, +-50 nats, a single token, the band and the
    entropy threshold approached from both sides, infinities in the padding."""
    x = batch(11)
    valid = x["mask"] > 0
    s = x["sampler_logprobs"]
    if case == "identical":
        x["old_logprobs"] = s.clone()
    elif case == "on_edges":  # dyadic sampler log-probs: old - sampler is the edge exactly
        edges = torch.tensor(EDGES, dtype=torch.float64)
        signs = torch.where(torch.rand(s.shape, generator=torch.Generator().manual_seed(3)) < 0.5, -1.0, 1.0)
        d = edges[torch.arange(s.numel()) % len(edges)].reshape(s.shape) * signs
        x["sampler_logprobs"] = torch.where(valid, torch.round(s * 8) / 8, math.nan)
        x["old_logprobs"] = torch.where(valid, x["sampler_logprobs"] + d, math.nan)
    elif case == "huge":
        x["old_logprobs"] = s + torch.where(torch.arange(s.shape[1]) % 3 == 0, 50.0, -50.0)
    elif case == "one_token":
        x["mask"] = torch.zeros_like(x["mask"])
        x["mask"][4, 2] = 1.0
    elif case == "band_and_threshold":
        d = torch.tensor([math.log(0.5) - 1e-9, math.log(0.5) + 1e-9, math.log(2) - 1e-9, math.log(2) + 1e-9])
        x["old_logprobs"] = s + d.repeat(s.shape[1] // 4 + 1)[: s.shape[1]]
        x["entropy"] = torch.tensor([0.01 - 1e-12, 0.01, 0.01 + 1e-12]).repeat(s.shape[1] // 3 + 1)[: s.shape[1]]
        x["entropy"] = x["entropy"].expand_as(s).clone()
    else:
        for k in ("sampler_logprobs", "old_logprobs", "entropy"):
            x[k] = torch.where(valid, x[k], math.inf if k != "old_logprobs" else -math.inf)
    want = reference(x)
    for form in ("eager", "compiled-traced"):
        inputs = token_inputs(**x)
        vec = backends.EAGER.run(inputs) if form == "eager" else token_vector(inputs, fast=True)
        assert_close(sampler_metrics(vec), want, 1e-9)
    if case == "identical":
        assert want["grpo/mismatch/k3_mean"] == 0 and want["grpo/mismatch/ratio_mean_z"] == 0


def test_p99_brackets_the_exact_percentile():
    """The reported p99 is an upper bound of the exact 99th percentile, within one bin (25%)."""
    x = batch(5, B=100, T=300, scale=0.1)
    got = sampler_metrics(token_sufficient_stats(**x, compile=False))["grpo/mismatch/abs_diff_p99"]
    valid = x["mask"].numpy() > 0
    d = np.abs(x["old_logprobs"].numpy()[valid] - x["sampler_logprobs"].numpy()[valid])
    exact = np.percentile(d, 99, method="inverted_cdf")
    assert exact <= got <= 1.25 * exact


@pytest.mark.parametrize("cuts", [(1,), (3, 7), (1, 2, 5, 9, 11)], ids=lambda c: f"{len(c) + 1}-micro-batches")
def test_micro_batches_merge_exactly(cuts):
    """Rows split over micro-batches merge to the whole batch's keys (combine_token_stats and the monitor)."""
    x = batch(3, scale=0.2)
    want = reference(x)
    bounds = (0, *cuts, len(x["mask"]))
    parts = [{k: v[a:b] for k, v in x.items()} for a, b in zip(bounds, bounds[1:], strict=False)]
    merged = None
    mon = GRPOMonitor(MonitorConfig(strict=True, policies={"mismatch": "ignore"}))
    for p in parts:
        vec = token_sufficient_stats(**p, compile=False)
        merged = vec if merged is None else combine_token_stats(merged, vec)
        mon.observe_loss(**p)
    assert_close(sampler_metrics(merged), want, 1e-9)
    report = mon.end_step()
    assert_close({k: v for k, v in report.metrics.items() if k.startswith(SAMPLER_KEYS)}, want, 1e-9)


def test_which_trainer_log_probs_and_which_keys():
    """Delta uses old_logprobs, else logprobs; sampler log-probs alone give only sampled_nll_mean; no sampler
    and no entropy: no new key except sampled_nll_mean from old_logprobs."""
    x = batch(2)
    no_old = {k: v for k, v in x.items() if k != "old_logprobs"}
    assert_close(sampler_metrics(token_sufficient_stats(**no_old, compile=False)), reference(no_old, use_old=False),
                 1e-9)
    alone = dict(mask=x["mask"], sampler_logprobs=x["sampler_logprobs"])
    assert set(sampler_metrics(token_sufficient_stats(**alone, compile=False))) == {"grpo/entropy/sampled_nll_mean"}
    old_only = dict(mask=x["mask"], old_logprobs=x["old_logprobs"], logprobs=x["logprobs"])
    got = sampler_metrics(token_sufficient_stats(**old_only, compile=False))
    valid = x["mask"].numpy() > 0
    assert got == {"grpo/entropy/sampled_nll_mean": pytest.approx(-x["old_logprobs"].numpy()[valid].mean(), 1e-12)}


def test_bad_sampler_inputs_name_the_argument():
    """A misaligned or non-tensor sampler_logprobs / entropy is the user's error, naming the argument."""
    mon = GRPOMonitor(MonitorConfig(strict=True))
    with pytest.raises(ValueError, match="sampler_logprobs has shape"):
        mon.observe_loss(mask=torch.ones(2, 3), sampler_logprobs=torch.zeros(2, 4), old_logprobs=torch.zeros(2, 3))
    with pytest.raises(TypeError, match="entropy must"):
        mon.observe_loss(mask=torch.ones(2, 3), entropy="high")
    with pytest.raises(ValueError, match="mismatch_band"):
        token_sufficient_stats(torch.ones(1, 1), mismatch_band=(1.5, 2.0))


@pytest.mark.slow  # one inductor build: ~10 s on 2 cores
@pytest.mark.timeout(600)
def test_inductor_compiled_pass_matches_the_reference(monkeypatch):
    """The compiled backend itself (polynomial exponentials, the histogram's scatter) on float32 inputs."""
    pytest.importorskip("torch._inductor")
    monkeypatch.setattr(backends.COMPILED, "broken", False)
    x = batch(9, B=32, T=128, scale=0.05, dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        vec = backends.COMPILED.run(token_inputs(**x))
    got, want = sampler_metrics(vec), reference(x)
    got_p99, want_p99 = got.pop("grpo/mismatch/abs_diff_p99"), want.pop("grpo/mismatch/abs_diff_p99")
    assert_close(got, want, 1e-4)
    assert got_p99 == pytest.approx(want_p99, rel=0.26)


def test_sampler_inputs_skip_the_inductor_pass(monkeypatch):
    """With sampler log-probs or entropies compile=True never selects the inductor pass (its histogram scatter
    takes minutes to build): the C kernel where it runs, else eager; without them the choice is unchanged."""
    from grpo_monitor.stats.tokens import select_backend

    monkeypatch.setattr(backends.COMPILED, "broken", False)
    x = batch(1, dtype=torch.float32)
    native = backends.NATIVE.accepts(token_inputs(**x))
    assert select_backend(token_inputs(**x), compile=True).name == ("native" if native else "eager")
    monkeypatch.setenv("GRPO_MONITOR_NATIVE", "0")
    assert select_backend(token_inputs(**x), compile=True).name == "eager"
    plain = {k: v for k, v in x.items() if k not in ("sampler_logprobs", "entropy")}
    assert select_backend(token_inputs(**plain), compile=True).name == "compiled"
