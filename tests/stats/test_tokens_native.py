"""The token backends (native C, compiled, eager) against a float64 reference, slot by slot.

The first section checks that the three backends agree on every slot of the vector with
a per-slot float64 reference; the rest checks the C kernel (the native backend) in depth
against the float64 metrics reference and the eager backend. The kernel is compiled here
with the machine's C compiler (the one ``torch.compile`` needs); its tests skip only on a
CPU without AVX2 or a machine without a compiler.
"""

from __future__ import annotations

import math
import os
import stat
import tempfile
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from test_tokens import assert_metrics_close, reference_metrics, seed_batch, stats

from grpo_monitor.stats.tokens import (
    TOKEN_FIELDS,
    TOKEN_INDEX,
    backends,
    token_inputs,
    token_metrics,
    token_sufficient_stats,
)
from grpo_monitor.stats.tokens import native_build as _native
from grpo_monitor.stats.tokens.arguments import TENSOR_NAMES
from grpo_monitor.stats.tokens.torch_rows import token_vector

FIELDS = [name for name, _ in TOKEN_FIELDS]
#: Slots that are counts or extrema of the inputs: equal exactly whatever the summation order
#: (not |kl - k3|, whose k3 comes from the polynomial here and from expm1 eagerly).
#: (Nor the extremes of a row's mean log ratio, a quotient of a float32 sum.)
_NOT_EXACT = ("user_k3_absdiff_max", "seq_log_min", "seq_log_max")
EXACT = [i for i, (n, op) in enumerate(TOKEN_FIELDS)
         if n not in _NOT_EXACT and (op != "sum" or n.endswith(("tokens", "nonbinary", "nonfinite", "_pos",
                                                                "clipped", "hits")))]


# ----------------------------------------------------------------------------- the three backends agree
NAMES = ("advantages", "logprobs", "ref_logprobs", "old_logprobs", "kl")
MASK_DTYPES = (torch.float32, torch.bool, torch.uint8, torch.int32, torch.int64, torch.float64, torch.float16)
CLIP, CLAMP = (0.2, 0.25), (0.125, 0.875)
#: advantages none / (B,) / (B, T), each of the four other tensors in or out, float32 and float64 values
CASES = [(adv, others, dtype) for dtype in (torch.float32, torch.float64) for adv in (None, 1, 2)
         for others in range(16)]


def _have_native() -> bool:
    """An AVX2 CPU and a C compiler: the native backend can be built here."""
    try:
        _native.compiler()
    except RuntimeError:
        return False
    return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


HAVE_NATIVE = _have_native()


def run_backend(backend: str, inputs) -> torch.Tensor:
    """One token pass of ``inputs`` on ``backend`` ("eager", "compiled (traced form)" or "native"; native skips
    without an AVX2 CPU or a C compiler, and must accept the inputs)."""
    if backend == "eager":
        return backends.EAGER.run(inputs)
    if backend == "compiled (traced form)":
        return token_vector(inputs, fast=True)
    if not HAVE_NATIVE:
        pytest.skip("no AVX2 CPU or C compiler")
    assert backends.NATIVE.accepts(inputs)
    return backends.NATIVE.run(inputs)


def case_inputs(adv: int | None, others: int, dtype: torch.dtype, seed: int) -> dict:
    """Random (7, 45) tensors: a row without tokens, non-binary mask entries, NaN / inf / huge padding,
    log ratios kept 1e-4 away from the clip bounds (float32 and float64 round differently there)."""
    gen = torch.Generator().manual_seed(seed)
    B, T = 7, 45
    mask = (torch.rand(B, T, generator=gen) < 0.7).double()
    mask[3] = 0.0
    mask[0, :3] = torch.tensor([2.0, 0.5, 2.0])
    lp = -3 * torch.rand(B, T, generator=gen, dtype=torch.float64)
    lr = 0.3 * torch.randn(B, T, generator=gen, dtype=torch.float64)
    for bound in (math.log(1 - CLIP[0]), math.log1p(CLIP[1])):
        lr = torch.where((lr - bound).abs() < 1e-4, lr + 3e-4, lr)
    x = {"logprobs": lp, "ref_logprobs": lp + 0.4 * torch.randn(B, T, generator=gen, dtype=torch.float64),
         "old_logprobs": lp - lr, "kl": 1.4 * torch.rand(B, T, generator=gen, dtype=torch.float64) - 0.2}
    x = {k: v for i, (k, v) in enumerate(x.items()) if others >> i & 1}
    if adv is not None:
        x["advantages"] = torch.randn(*((B,) if adv == 1 else (B, T)), generator=gen, dtype=torch.float64)
        x["advantages"][5] = 0.0  # a row without signal
    for k, v in x.items():
        if v.dim() == 2:
            x[k] = torch.where(mask > 0, v, [math.nan, math.inf, -1e30][seed % 3])
    mask_dtype = MASK_DTYPES[seed % len(MASK_DTYPES)]
    return {"mask": mask.to(mask_dtype), **{k: v.to(dtype) for k, v in x.items()}}


class Slots(dict):
    """Reference slot values by name, with a scale (sum of |terms|) per sum for its tolerance."""

    def __init__(self) -> None:
        super().__init__()
        self.scale: dict[str, float] = {}

    def sum(self, name: str, terms: np.ndarray) -> None:
        self[name], self.scale[name] = float(terms.sum()), float(np.abs(terms).sum())

    def max(self, name: str, terms: np.ndarray) -> None:
        self[name] = float(terms.max()) if terms.size else -math.inf


def reference_slots(x: dict, clamp: tuple[float, float] | None) -> Slots:
    """Every slot from its definition over the valid tokens, in float64 numpy; slots of absent inputs left out
    (the vector holds their identity there)."""
    m = x["mask"].double().numpy()
    valid = m > 0
    f = {k: x[k].double().numpy() for k in NAMES if k in x}
    v = Slots()
    v.update(valid_tokens=float(valid.sum()), rows_with_tokens=float(valid.any(1).sum()),
             mask_nonbinary=float(((m != 0) & (m != 1)).sum()))
    if "advantages" in f:
        _adv_slots(v, valid, f["advantages"])
    given = [f[k][valid] for k in ("logprobs", "ref_logprobs", "old_logprobs") if k in f]
    if given:
        v["logprob_tokens"] = v["valid_tokens"]
        v["logprob_nonfinite"] = float((~np.all([np.isfinite(g) for g in given], axis=0)).sum())
    k3 = None
    if "logprobs" in f and "ref_logprobs" in f:
        k3 = _kl_slots(v, f["ref_logprobs"][valid] - f["logprobs"][valid])
    if "kl" in f:
        _user_slots(v, f["kl"][valid], k3, clamp)
    if "logprobs" in f and "old_logprobs" in f:
        lr = f["logprobs"][valid] - f["old_logprobs"][valid]
        ratio = np.exp(lr)
        v["ratio_tokens"] = float(lr.size)
        v["ratio_clipped"] = float(((ratio < 1 - CLIP[0]) | (ratio > 1 + CLIP[1])).sum())
        v.sum("ratio_m1_sum", np.expm1(lr))
        v.max("on_policy_absdiff_max", np.abs(lr))
        v.sum("ratio_k3_sum", np.expm1(lr) - lr)
        with np.errstate(invalid="ignore"):  # inf - inf in the padding, never read
            _seq_slots(v, valid, f["logprobs"] - f["old_logprobs"])
    if "old_logprobs" in f:
        v["nll_tokens"] = v["valid_tokens"]
        v.sum("nll_sum", -f["old_logprobs"][valid])
    return v


def _seq_slots(v: Slots, valid: np.ndarray, lr: np.ndarray) -> None:
    """GSPO's sequence ratio w = exp(mean lr over a row's valid tokens), rows with tokens only."""
    m = np.array([lr[r][valid[r]].mean() for r in range(len(lr)) if valid[r].any()])
    w = np.exp(m)
    v["seq_rows"] = float(m.size)
    v.sum("seq_w_sum", w)
    v.sum("seq_w_sq_sum", w * w)
    v["seq_log_min"], v["seq_log_max"] = float(m.min()), float(m.max())
    v["seq_clipped"] = float(((w < 1 - CLIP[0]) | (w > 1 + CLIP[1])).sum())
    v["seq_tail"] = float(((w < 0.5) | (w > 2.0)).sum())


def _adv_slots(v: Slots, valid: np.ndarray, adv: np.ndarray) -> None:
    a = adv if adv.ndim == 2 else np.repeat(adv[:, None], valid.shape[1], 1)
    rows = [a[r][valid[r]] for r in range(len(a)) if valid[r].any()]
    v["adv_tokens"] = float(valid.sum())
    v.sum("adv_sum", a[valid])
    v.sum("adv_abs_sum", np.abs(a[valid]))
    v["adv_row_spread_max"] = max((float(np.ptp(r)) for r in rows), default=-math.inf)
    v["adv_live_tokens"] = float(sum(r.size for r in rows if (r != 0).any()))


def _kl_slots(v: Slots, u: np.ndarray) -> np.ndarray:
    """Moments and extremes of u = ref - logprobs and of k3 = exp(u) - u - 1; returns k3."""
    k3 = np.expm1(u) - u
    v["kl_tokens"], v["kl_u_pos"] = float(u.size), float((u > 0).sum())
    for name, terms in (("kl_u_sum", u), ("kl_u_sq_sum", u**2), ("kl_u_quad_sum", u**4), ("kl_k3_sum", k3),
                        ("kl_k3_sq_sum", k3**2)):
        v.sum(name, terms)
    v.max("kl_u_max", u)
    v["kl_u_min"] = float(u.min()) if u.size else math.inf
    return k3


def _user_slots(v: Slots, user: np.ndarray, k3: np.ndarray | None, clamp: tuple[float, float] | None) -> None:
    v["user_kl_tokens"] = float(user.size)
    v.sum("user_kl_sum", user)
    v.sum("user_kl_sq_sum", user**2)
    if k3 is not None:
        v["user_k3_tokens"] = float(user.size)
        v.max("user_k3_absdiff_max", np.abs(user - k3))
    if clamp is not None:
        v["user_clamp_tokens"] = float(user.size)
        v["user_clamp_hits"] = float(((user <= clamp[0]) | (user >= clamp[1])).sum())


def assert_slots(got: torch.Tensor, want: Slots, rtol: float, who: str) -> None:
    """Counts exact, sums within rtol x their scale, extrema within rtol; absent slots at their identity."""
    identity = {"sum": 0.0, "min": math.inf, "max": -math.inf}
    for i, (name, op) in enumerate(TOKEN_FIELDS):
        value, expected = got[i].item(), want.get(name, identity[op])
        size = want.scale[name] if name in want.scale else abs(expected) if math.isfinite(expected) else 0.0
        close = value == expected or abs(value - expected) <= rtol * size + 1e-12
        assert close, f"{who}: {name} = {value}, expected {expected}"


@pytest.mark.parametrize("adv, others, dtype", CASES, ids=[
    f"{dtype}-adv{adv or 0}-" + ("+".join(k for i, k in enumerate(NAMES[1:]) if others >> i & 1) or "mask")
    for adv, others, dtype in CASES])
def test_the_three_backends_agree_on_every_slot(adv, others, dtype):
    """Native, compiled and eager give every slot of the float64 reference (masks of each dtype, cycled).

    "compiled" here is the function the compiled backend compiles (``token_vector(fast=True)``)
    run op by op; ``test_compiled_backend_agrees_on_every_slot`` runs it through inductor."""
    seed = CASES.index((adv, others, dtype))
    x = case_inputs(adv, others, dtype, seed)
    clamp = CLAMP if seed % 2 else None
    inputs = token_inputs(**x, clip_range=CLIP, kl_clamp=clamp)
    want = reference_slots(x, clamp)
    rtol = 2e-5 if dtype == torch.float32 else 1e-10
    assert_slots(backends.EAGER.run(inputs), want, rtol, "eager")
    assert_slots(token_vector(inputs, fast=True), want, rtol, "compiled (traced form)")
    takes = x["mask"].dtype in _native.MASK_KINDS and (dtype == torch.float32 or others == 0 and adv is None)
    if HAVE_NATIVE:
        assert backends.NATIVE.accepts(inputs) == takes
        if takes:
            assert_slots(backends.NATIVE.run(inputs), want, rtol, "native")


@pytest.mark.slow  # one inductor build per input combination: ~5 s each on 2 cores
@pytest.mark.timeout(600)
@pytest.mark.parametrize("adv, others, dtype", [(2, 15, torch.float32), (1, 15, torch.float32), (2, 15, torch.float64),
                                                (None, 9, torch.float32), (1, 6, torch.float32)], ids=str)
def test_compiled_backend_agrees_on_every_slot(adv, others, dtype, monkeypatch):
    """The compiled backend itself (inductor, polynomial exponentials) gives every slot of the float64 reference."""
    pytest.importorskip("torch._inductor")
    monkeypatch.setattr(backends.COMPILED, "broken", False)
    seed = CASES.index((adv, others, dtype))
    x = case_inputs(adv, others, dtype, seed)
    clamp = CLAMP if seed % 2 else None
    inputs = token_inputs(**x, clip_range=CLIP, kl_clamp=clamp)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a silent fallback to eager would pass otherwise
        got = backends.COMPILED.run(inputs)
    assert_slots(got, reference_slots(x, clamp), 2e-5 if dtype == torch.float32 else 1e-10, "compiled")


def test_selection_order_and_switches(monkeypatch):
    """compile=False, small 'auto', GRPO_MONITOR_COMPILE=0: eager; else native if it takes the inputs, then compiled."""
    monkeypatch.delenv("GRPO_MONITOR_COMPILE", raising=False)
    monkeypatch.delenv("GRPO_MONITOR_NATIVE", raising=False)
    monkeypatch.setattr(backends.COMPILED, "broken", False)
    f32 = token_inputs(torch.ones(4, 8), logprobs=torch.zeros(4, 8))
    f64 = token_inputs(torch.ones(4, 8), logprobs=torch.zeros(4, 8, dtype=torch.float64))
    pick = backends.select_backend
    assert pick(f32, compile=False) is pick(f32, compile="auto") is backends.EAGER  # 32 tokens: below the threshold
    assert pick(f64, compile=True) is backends.COMPILED
    if HAVE_NATIVE:
        assert pick(f32, compile=True) is backends.NATIVE
    monkeypatch.setenv("GRPO_MONITOR_NATIVE", "0")
    assert pick(f32, compile=True) is backends.COMPILED
    monkeypatch.setattr(backends.COMPILED, "broken", True)
    assert pick(f32, compile=True) is backends.EAGER
    monkeypatch.setenv("GRPO_MONITOR_COMPILE", "0")
    assert pick(f64, compile=True) is backends.EAGER
    assert [b.name for b in backends.BACKENDS] == ["native", "compiled", "eager"]


@pytest.fixture
def native(monkeypatch):
    """The kernel on, its state fresh, and the test failed (not skipped) should it silently fall back."""
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("the C kernel needs an AVX2 CPU")
    try:
        _native.compiler()
    except RuntimeError:
        pytest.skip("no C compiler on this machine")
    monkeypatch.delenv("GRPO_MONITOR_NATIVE", raising=False)
    monkeypatch.delenv("GRPO_MONITOR_COMPILE", raising=False)
    monkeypatch.setitem(_native._STATE, "broken", False)
    monkeypatch.setattr(backends.COMPILED, "broken", False)
    calls = []
    real = _native.token_stats
    monkeypatch.setattr(_native, "token_stats", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def run_native(calls, **x) -> torch.Tensor:
    """``token_sufficient_stats`` with ``compile=True``, asserting that the kernel produced it."""
    before = len(calls)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        vec = token_sufficient_stats(**x, compile=True)
    assert len(calls) == before + 1, "the C kernel was not used"
    return vec


def assert_agrees(got: torch.Tensor, want: torch.Tensor) -> None:
    """Counts and extrema exact, sums to float32 accumulation accuracy; a slot the eager path
    makes non-finite is non-finite here too (k3 of u = -inf is NaN on the polynomial paths,
    compiled and native alike, and +inf from expm1: either way the token is counted in
    ``logprob_nonfinite``, which must agree exactly)."""
    torch.testing.assert_close(got[EXACT], want[EXACT], rtol=0, atol=0, equal_nan=True)
    finite = want.isfinite()
    assert not got[~finite].isfinite().any(), f"finite where eager is not: {got[~finite]} vs {want[~finite]}"
    torch.testing.assert_close(got[finite], want[finite], rtol=2e-5, atol=1e-5)


def test_matches_float64_reference_at_one_million_tokens(native):
    """Every metric of a million tokens agrees with the float64 reference."""
    x = seed_batch(B=256, T=4096, p_valid=0.9, seed=21)
    got = token_metrics(run_native(native, **x))
    assert_metrics_close(got, reference_metrics(**{k: v.numpy() for k, v in x.items()}), rtol=1e-5, atol=1e-6,
                         std_slack=False)


@pytest.mark.parametrize("scale", [0.01, 0.3, 3.0, 6.0], ids=lambda s: f"u~{s}")
def test_large_and_small_log_ratios(native, scale):
    """Both exponential branches: |u| < 0.34 (no range reduction) and beyond, mixed within vectors."""
    gen = torch.Generator().manual_seed(22)
    B, T = 64, 1000
    lp = -torch.rand(B, T, generator=gen) * 5
    x = dict(mask=(torch.rand(B, T, generator=gen) < 0.85).float(), logprobs=lp,
             ref_logprobs=lp + scale * torch.randn(B, T, generator=gen),
             old_logprobs=lp + scale * torch.randn(B, T, generator=gen), advantages=torch.randn(B, generator=gen))
    x["kl"] = torch.rand(B, T, generator=gen) * 12 - 1
    got = token_metrics(run_native(native, **x))
    want = reference_metrics(**{k: v.numpy() for k, v in x.items()})
    assert_metrics_close(got, want, rtol=1e-4, atol=1e-6, std_slack=False)
    assert_agrees(run_native(native, **x), stats(**x))


PRESENCE = [(), ("advantages",), ("logprobs",), ("ref_logprobs",), ("logprobs", "ref_logprobs"),
            ("logprobs", "old_logprobs"), ("ref_logprobs", "old_logprobs"),
            ("logprobs", "ref_logprobs", "old_logprobs"),
            ("advantages", "logprobs", "ref_logprobs", "old_logprobs", "kl"), ("logprobs", "kl"),
            ("logprobs", "ref_logprobs", "kl")]


@pytest.mark.parametrize("given", PRESENCE, ids=lambda g: "+".join(g) or "mask")
@pytest.mark.parametrize("T", [7, 16, 1029, 2500], ids=lambda t: f"T{t}")
def test_every_input_combination_agrees_with_eager(native, given, T):
    """Tails (T % 8), several segments per row (T > 1024), each subset of the inputs."""
    x = seed_batch(B=9, T=T, p_valid=0.7, seed=T)
    x["kl"] = torch.where(x["mask"] > 0, torch.rand(9, T) * 11 - 0.5, math.nan)
    y = {"mask": x["mask"], **{k: x[k] for k in given}}
    assert_agrees(run_native(native, **y), stats(**y))


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.uint8, torch.int32, torch.int64], ids=str)
def test_mask_dtypes(native, mask_dtype):
    """bool, uint8, int32 and int64 masks give the eager statistics, non-binary entries counted."""
    x = seed_batch(B=6, T=333, seed=23)
    x["mask"] = x["mask"].to(mask_dtype)
    if mask_dtype != torch.bool:
        x["mask"][0, :5] = torch.tensor([2, 3, 0, 1, 7], dtype=mask_dtype)  # non-binary entries are counted
    assert_agrees(run_native(native, **x), stats(**x))


def test_float_mask_oddities_are_counted_like_eager(native):
    """Fractional, negative, NaN, -0.0 and inf mask entries are valid or not, and counted, as eagerly."""
    x = seed_batch(B=4, T=40, seed=24)
    x["mask"][0, :6] = torch.tensor([0.5, -1.0, math.nan, -0.0, 2.0, math.inf])
    got = run_native(native, **x)
    assert_agrees(got, stats(**x))
    assert got[TOKEN_INDEX["mask_nonbinary"]] == 5  # -0.0 is zero


def test_row_advantages_and_no_advantages(native):
    """One advantage per row (some zero) gives the eager statistics."""
    x = seed_batch(B=12, T=100, seed=25)
    x["advantages"] = x["advantages"][:, 0].clone().nan_to_num(0.0)
    x["advantages"][3] = 0.0
    assert_agrees(run_native(native, **x), stats(**x))


@pytest.mark.parametrize("where", ["adv_nan", "adv_inf", "lp_inf", "lp_-inf", "ref_nan", "ref_-inf", "old_inf",
                                   "old_-inf", "old_nan", "kl_inf", "kl_nan", "u_overflow", "lr_huge"])
def test_non_finite_values_on_valid_tokens(native, where):
    """Rows whose sums turn non-finite are recounted exactly: NaN-propagating extrema, the exact non-finite count."""
    x = seed_batch(B=5, T=50, p_valid=1.0, seed=26)
    x["kl"] = torch.rand(5, 50)
    name, value = where.split("_")
    key = {"adv": "advantages", "lp": "logprobs", "ref": "ref_logprobs", "old": "old_logprobs", "kl": "kl",
           "u": "ref_logprobs", "lr": "old_logprobs"}[name]
    x[key][2, 7] = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "overflow": 3e38, "huge": 3e38}[value]
    if where == "u_overflow":
        x["logprobs"][2, 7] = -3e38
    got, want = run_native(native, **x), stats(**x)
    assert_agrees(got, want)
    assert got[TOKEN_INDEX["logprob_nonfinite"]] == want[TOKEN_INDEX["logprob_nonfinite"]]


def test_garbage_in_the_padding_never_leaks(native):
    """NaN, inf or any value off the mask leaves the statistics bit for bit unchanged."""
    clean = seed_batch(B=16, T=257, p_valid=0.6, seed=27, garbage=0.0)
    results = []
    for garbage in (math.nan, math.inf, -3e38, 5.0):
        x = {k: v.clone() for k, v in clean.items()}
        for k in ("advantages", "logprobs", "ref_logprobs", "old_logprobs"):
            x[k][x["mask"] == 0] = garbage
        results.append(run_native(native, **x))
    for r in results[1:]:
        assert torch.equal(r, results[0])


def test_result_does_not_depend_on_the_thread_count(native):
    """One thread or many: the same statistics, and the same bits for the same thread count."""
    x = seed_batch(B=33, T=600, seed=28)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = run_native(native, **x)
        torch.set_num_threads(max(2, before))
        many = run_native(native, **x)
    finally:
        torch.set_num_threads(before)
    assert_agrees(many, one)
    assert torch.equal(run_native(native, **x), many), "same thread count, same bits"


def test_inputs_it_does_not_take_go_to_the_compiled_path(native, monkeypatch):
    """float64, bfloat16 and non-contiguous inputs: the same statistics through torch.compile / eager."""
    monkeypatch.setattr(backends.COMPILED, "run", backends.EAGER.run)  # no inductor build
    x = seed_batch(B=8, T=64, seed=29)
    for y in ({**x, "logprobs": x["logprobs"].double()}, {**x, "ref_logprobs": x["ref_logprobs"].bfloat16()},
              {**x, "old_logprobs": x["old_logprobs"].t().contiguous().t()}):
        assert not backends.NATIVE.accepts(token_inputs(**y))
        assert backends.select_backend(token_inputs(**y), compile=True) is backends.COMPILED
        token_sufficient_stats(**y, compile=True)
    assert native == [], "the kernel was called for inputs it does not take"


def test_environment_switches_turn_it_off(native, monkeypatch):
    """GRPO_MONITOR_NATIVE=0, GRPO_MONITOR_COMPILE=0 and compile=False never call the kernel."""
    monkeypatch.setattr(backends.COMPILED, "run", backends.EAGER.run)
    x = seed_batch(B=4, T=32, seed=30)
    for var in ("GRPO_MONITOR_NATIVE", "GRPO_MONITOR_COMPILE"):
        monkeypatch.setenv(var, "0")
        token_sufficient_stats(**x, compile=True)
        monkeypatch.delenv(var)
    token_sufficient_stats(**x, compile=False)
    assert native == []


def test_a_failed_build_warns_once_and_falls_back(native, monkeypatch, tmp_path):
    """No compiler: one RuntimeWarning, eager statistics, and no further build attempts."""
    monkeypatch.setitem(_native._STATE, "lib", None)
    monkeypatch.setenv("GRPO_MONITOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setattr(_native, "compiler", lambda: str(tmp_path / "no-such-cc"))
    monkeypatch.setattr(backends.COMPILED, "run", backends.EAGER.run)
    x = seed_batch(B=4, T=32, seed=31)
    with pytest.warns(RuntimeWarning, match="native token kernel is unavailable"):
        first = token_sufficient_stats(**x, compile=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = token_sufficient_stats(**x, compile=True)
    assert torch.equal(first, stats(**x)) and torch.equal(second, first)
    assert _native._STATE["broken"]


def test_build_is_cached_and_safe_to_race(native, monkeypatch, tmp_path):
    """Two builders into one empty cache (two ranks starting together) get one complete library."""
    monkeypatch.setenv("GRPO_MONITOR_CACHE_DIR", str(tmp_path))
    paths, errors = [], []

    def build():
        try:
            paths.append(_native._build())
        except Exception as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(paths)) == 1
    assert [p.name for p in tmp_path.iterdir()] == [paths[0].name], "no temporary files left behind"
    _native._load(paths[0], FIELDS)
    assert _native._build() == paths[0]


def test_a_library_with_another_slot_order_is_refused(native, monkeypatch, tmp_path):
    """A library whose slot order differs from TOKEN_FIELDS is never used."""
    monkeypatch.setenv("GRPO_MONITOR_CACHE_DIR", str(tmp_path))
    with pytest.raises(RuntimeError, match="differently from TOKEN_FIELDS"):
        _native._load(_native._build(), FIELDS[::-1])


def test_seed_kl_table_through_the_kernel(native):
    """Seed 002 section 4: k1 and k3 unbiased for 0.023224, k1 negative on ~30% of tokens, k3 never."""
    x = seed_batch(B=512, T=2048, p_valid=0.9, seed=32)
    m = token_metrics(run_native(native, **x))
    pi, pi_ref = np.array([0.40, 0.30, 0.15, 0.10, 0.05]), np.array([0.35, 0.25, 0.20, 0.12, 0.08])
    true_kl = float(np.sum(pi * np.log(pi / pi_ref)))
    n = m["grpo/tokens/valid"]
    for k in ("k1", "k3"):
        assert abs(m[f"grpo/kl/{k}_mean"] - true_kl) < 4 * m[f"grpo/kl/{k}_std"] / math.sqrt(n)
    assert m["grpo/kl/k1_neg_frac"] == pytest.approx(float(pi[pi < pi_ref].sum()), abs=0.005)
    assert m["grpo/kl/k3_neg_frac"] == 0.0


# ----------------------------------------------------------------------------- inside torch.compile
def op_args(x: dict) -> tuple:
    """``x`` as the arguments of the custom op, with the default clip range, KL clamp, mismatch band and
    entropy threshold, and the slot count (the value tensors in the token-input table's order, absent ones None)."""
    return (x["mask"], *(x.get(name) for name in TENSOR_NAMES), math.log(0.8), math.log1p(0.2), True, -10.0, 10.0,
            math.log(0.5), math.log(2.0), 0.01, len(TOKEN_FIELDS))


def test_custom_op_passes_opcheck_and_agrees_with_eager(native):
    """The op a compiled caller's graph holds: schema, fake (the vector's shape and dtype) and results check out."""
    x = seed_batch(B=8, T=100, seed=33)
    torch.library.opcheck(backends.native_token_stats, op_args(x))
    assert_agrees(backends.native_token_stats(*op_args(x)), stats(**x))


def test_custom_op_computes_eagerly_without_the_library(native, monkeypatch, tmp_path):
    """A failed build inside a compiled graph cannot return None: the op warns once and runs the eager kernel."""
    monkeypatch.setitem(_native._STATE, "lib", None)
    monkeypatch.setenv("GRPO_MONITOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_native, "compiler", lambda: str(tmp_path / "no-such-cc"))
    x = seed_batch(B=8, T=100, seed=34)
    with pytest.warns(RuntimeWarning, match="native token kernel is unavailable"):
        got = backends.native_token_stats(*op_args(x))
    assert torch.equal(got, stats(**x))


# ----------------------------------------------------------------------------- a cache only we can write
@pytest.fixture
def machine_tmp(monkeypatch, tmp_path) -> Path:
    """tempfile's folder moved under ``tmp_path`` (the fallback cache lives there), ``~/.cache`` not used."""
    if not hasattr(os, "getuid"):
        pytest.skip("file ownership checks need POSIX uids")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setitem(_native._STATE, "lib", None)
    return tmp


def grpo_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if str(w.message).startswith("grpo-monitor")]


def test_a_cache_dir_others_can_write_is_passed_over_with_one_warning(native, monkeypatch, tmp_path, machine_tmp):
    """A world-writable GRPO_MONITOR_CACHE_DIR holding a file at the library's name is never read."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / _native.library_name()).write_text("planted: loading this would run it")
    monkeypatch.setenv("GRPO_MONITOR_CACHE_DIR", str(shared))
    x = seed_batch(B=8, T=100, seed=35)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = token_sufficient_stats(**x, compile=True)
    [message] = grpo_warnings(caught)
    assert str(shared) in message and "writable by other users" in message
    assert Path(_native._STATE["lib"]._name).parent == machine_tmp / f"grpo_monitor-{os.getuid()}"
    assert len(native) == 1
    assert_agrees(got, stats(**x))


def test_built_library_and_its_folder_are_private(native, monkeypatch, tmp_path, machine_tmp):
    """A fresh cache folder is 0700 and the library in it ours, writable by nobody else, loaded without a warning."""
    monkeypatch.setenv("GRPO_MONITOR_CACHE_DIR", str(tmp_path / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = _native._build()
    assert path.parent == tmp_path / "cache" and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def test_a_symlink_at_the_library_name_is_replaced_not_followed(native, monkeypatch, tmp_path, machine_tmp):
    """A symlink where the library should be is refused with a warning, and the rebuild replaces the link itself."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    decoy = tmp_path / "decoy.so"
    decoy.write_text("the link's target: must stay as it is")
    (cache / _native.library_name()).symlink_to(decoy)
    monkeypatch.setenv("GRPO_MONITOR_CACHE_DIR", str(cache))
    with pytest.warns(RuntimeWarning, match="is a symlink"):
        path = _native._build()
    assert path == cache / _native.library_name() and not path.is_symlink()
    assert decoy.read_text() == "the link's target: must stay as it is"
    _native._load(path, FIELDS)
