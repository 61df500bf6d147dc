"""Loss-side token statistics against an independent float64 numpy reference.

The reference below selects valid tokens with boolean indexing and computes every metric
directly (means, ``np.std``, fractions, maxima) in float64; it shares no code with the
sufficient-statistics formulation under test.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_monitor.stats.tokens import (
    FIELDS,
    TOKEN_FIELDS,
    TOKEN_INDEX,
    TOKEN_LAYOUT,
    TOKEN_REDUCTIONS,
    backends,
    combine_token_stats,
    token_metrics,
    token_sufficient_stats,
    validate_token_inputs,
)

PI = np.array([0.40, 0.30, 0.15, 0.10, 0.05])  # pi_theta (seed 002, section 4)
PI_REF = np.array([0.35, 0.25, 0.20, 0.12, 0.08])
TRUE_KL = float(np.sum(PI * np.log(PI / PI_REF)))  # 0.023224
NAMES = ("advantages", "logprobs", "ref_logprobs", "old_logprobs", "kl")


def stats(mask, **kw) -> torch.Tensor:
    kw.setdefault("compile", False)
    return token_sufficient_stats(mask, **kw)


# ----------------------------------------------------------------------------- the reference
def reference_metrics(mask, advantages=None, logprobs=None, ref_logprobs=None, old_logprobs=None, kl=None,
                      clip_range=(0.2, 0.2), kl_clamp=(-10.0, 10.0)) -> dict[str, float]:
    """Every metric straight from the valid tokens, in float64 numpy."""
    m = np.asarray(mask, dtype=np.float64)
    f = {k: None if v is None else np.asarray(v, dtype=np.float64) for k, v in dict(
        a=advantages, lp=logprobs, ref=ref_logprobs, old=old_logprobs, kl=kl).items()}
    valid = m > 0
    n, rows = int(valid.sum()), valid.any(1)
    out = {"grpo/tokens/valid": n, "grpo/tokens/rows": int(rows.sum()),
           "grpo/tokens/mask_nonbinary": int(((m != 0) & (m != 1)).sum())}
    if rows.any():
        out["grpo/tokens/response_length_mean"] = valid.sum(1)[rows].mean()
    if f["a"] is not None and n:
        a = f["a"][:, None].repeat(m.shape[1], 1) if f["a"].ndim == 1 else f["a"]
        live = np.array([(a[i][valid[i]] != 0).any() for i in range(len(a))])
        spreads = [np.ptp(a[i][valid[i]]) for i in range(len(a)) if valid[i].any()]
        out.update({"grpo/tokens/live_fraction": valid[live].sum() / n, "grpo/tokens/adv_mean": a[valid].mean(),
                    "grpo/tokens/adv_abs_mean": np.abs(a[valid]).mean(),
                    "grpo/tokens/adv_row_spread_max": max(spreads)})
    given = [f[k][valid] for k in ("lp", "ref", "old") if f[k] is not None]
    if given and n:
        out["grpo/tokens/logprob_nonfinite"] = int((~np.all([np.isfinite(g) for g in given], axis=0)).sum())
    k3 = None
    if f["lp"] is not None and f["ref"] is not None and n:
        u = f["ref"][valid] - f["lp"][valid]
        k3 = np.expm1(u) - u
        for name, k in (("k1", -u), ("k2", u * u / 2), ("k3", k3)):
            out.update({f"grpo/kl/{name}_mean": k.mean(), f"grpo/kl/{name}_std": k.std(),
                        f"grpo/kl/{name}_neg_frac": (k < 0).mean(), f"grpo/kl/{name}_max": k.max()})
    if f["kl"] is not None and n:
        user = f["kl"][valid]
        out.update({"grpo/kl/user_mean": user.mean(), "grpo/kl/user_std": user.std()})
        if k3 is not None:
            out["grpo/kl/user_k3_max_abs_diff"] = np.abs(user - k3).max()
        if kl_clamp is not None:
            out["grpo/kl/user_clamp_frac"] = ((user <= kl_clamp[0]) | (user >= kl_clamp[1])).mean()
    if f["lp"] is not None and f["old"] is not None and n:
        lr = f["lp"][valid] - f["old"][valid]
        ratio = np.exp(lr)
        out.update({"grpo/ratio/mean": ratio.mean(), "grpo/ratio/log_abs_max": np.abs(lr).max(),
                    "grpo/ratio/clip_frac": ((ratio < 1 - clip_range[0]) | (ratio > 1 + clip_range[1])).mean()})
        out.update(reference_seq_ratio(valid, f["lp"], f["old"], clip_range))
    if f["old"] is not None and n:
        out["grpo/entropy/sampled_nll_mean"] = -f["old"][valid].mean()
    return {k: float(v) for k, v in out.items()}


def reference_seq_ratio(valid: np.ndarray, lp: np.ndarray, old: np.ndarray, clip_range=(0.2, 0.2),
                        band=(0.5, 2.0)) -> dict[str, float]:
    """``grpo/seq_ratio/*``: w = exp(mean of lp - old over a row's valid tokens), one per row with tokens (float64)."""
    w = np.exp(np.array([(lp[i][valid[i]] - old[i][valid[i]]).mean() for i in range(len(valid)) if valid[i].any()]))
    return {"grpo/seq_ratio/mean": w.mean(), "grpo/seq_ratio/min": w.min(), "grpo/seq_ratio/max": w.max(),
            "grpo/seq_ratio/ess": w.sum() ** 2 / (w.size * (w * w).sum()),
            "grpo/seq_ratio/clip_frac": ((w < 1 - clip_range[0]) | (w > 1 + clip_range[1])).mean(),
            "grpo/seq_ratio/tail_frac": ((w < band[0]) | (w > band[1])).mean()}


def assert_metrics_close(got: dict, want: dict, rtol: float = 2e-5, atol: float = 1e-7, std_slack: bool = True) -> None:
    """Keys equal, values close; with ``std_slack`` a std may also be off by 5e-4 x rms (float32 sums of
    squares: near-constant values, see readout.token_metrics)."""
    assert set(got) == set(want), f"keys differ: extra {set(got) - set(want)}, missing {set(want) - set(got)}"
    for key, value in want.items():
        tol = atol
        if key.endswith("_std") and std_slack:
            mean = want[key.replace("_std", "_mean")]
            tol = max(atol, 5e-4 * math.hypot(mean, value))
        assert got[key] == pytest.approx(value, rel=rtol, abs=tol, nan_ok=True), key


def seed_batch(B: int = 125, T: int = 2000, p_valid: float = 0.8, seed: int = 0, garbage: float = math.nan) -> dict:
    """Tokens sampled from pi_theta, log-probs under pi_theta and pi_ref, right padding holding garbage."""
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(PI), size=(B, T), p=PI)
    mask = (rng.random((B, T)) < p_valid).astype(np.float32)
    lp, ref = np.log(PI)[idx].astype(np.float32), np.log(PI_REF)[idx].astype(np.float32)
    old = (lp + rng.normal(0, 0.1, (B, T))).astype(np.float32)
    adv = np.repeat(rng.normal(size=(B, 1)), T, 1).astype(np.float32)
    adv[rng.random(B) < 0.3] = 0.0  # degenerate groups: rows without signal
    for x in (lp, ref, old, adv):
        x[mask == 0] = garbage
    return {k: torch.from_numpy(v) for k, v in dict(mask=mask, advantages=adv, logprobs=lp, ref_logprobs=ref,
                                                     old_logprobs=old).items()}


# ----------------------------------------------------------------------------- layout
def test_layout_has_the_slots_the_monitor_reads():
    """The invariants read these slots by name, with these reductions."""
    fields = dict(TOKEN_FIELDS)
    for name, op in (("valid_tokens", "sum"), ("rows_with_tokens", "sum"), ("adv_abs_sum", "sum"),
                     ("adv_tokens", "sum"),
                     ("adv_row_spread_max", "max"), ("mask_nonbinary", "sum"), ("logprob_nonfinite", "sum"),
                     ("on_policy_absdiff_max", "max")):
        assert fields[name] == op
    assert TOKEN_REDUCTIONS == tuple(op for _, op in TOKEN_FIELDS)
    assert len(set(fields)) == len(TOKEN_FIELDS)


def test_field_table_keys_point_at_count_slots():
    """A key reported from the table is unique, and its ``per`` / ``when`` slot is an earlier count (a sum)."""
    keys = [f.key for f in FIELDS if f.key]
    assert len(keys) == len(set(keys))
    index = {f.name: i for i, f in enumerate(FIELDS)}
    for i, f in enumerate(FIELDS):
        for gate in (f.per, f.when):
            assert gate is None or (FIELDS[index[gate]].reduction == "sum" and index[gate] < i), f.name
        assert f.reduction in ("sum", "min", "max") and not (f.per and f.reduction != "sum"), f.name


# ----------------------------------------------------------------------------- seed distributions
@pytest.fixture(scope="module")
def seed_tokens() -> dict:
    return seed_batch()


def test_everything_matches_float64_reference(seed_tokens):
    """All keys agree with the float64 numpy reference on the seed's distributions."""
    kl = (torch.expm1(seed_tokens["ref_logprobs"] - seed_tokens["logprobs"]) -
          (seed_tokens["ref_logprobs"] - seed_tokens["logprobs"])).clamp(max=0.05)
    x = dict(seed_tokens, kl=kl)
    got = token_metrics(stats(**x))
    assert_metrics_close(got, reference_metrics(**{k: v.numpy() for k, v in x.items()}))


def test_kl_estimators_reproduce_the_seed_table(seed_tokens):
    """k1, k3 unbiased for KL = 0.023224; k1 negative on ~30% of tokens; k2 biased by ~ -0.0013; k3 never negative."""
    m = token_metrics(stats(**seed_tokens))
    n = m["grpo/tokens/valid"]
    assert n > 190_000
    for name in ("k1", "k3"):
        se = m[f"grpo/kl/{name}_std"] / math.sqrt(n)
        assert abs(m[f"grpo/kl/{name}_mean"] - TRUE_KL) < 4 * se, name
    assert m["grpo/kl/k1_neg_frac"] == pytest.approx(0.30, abs=4 * math.sqrt(0.3 * 0.7 / n))
    k2_expected = float(np.sum(PI * np.log(PI_REF / PI) ** 2 / 2))
    assert k2_expected - TRUE_KL == pytest.approx(-0.0013, abs=1e-4)
    assert m["grpo/kl/k2_mean"] == pytest.approx(k2_expected, abs=4 * m["grpo/kl/k2_std"] / math.sqrt(n))
    assert m["grpo/kl/k3_neg_frac"] == 0.0 and m["grpo/kl/k2_neg_frac"] == 0.0
    assert m["grpo/kl/k1_std"] / m["grpo/kl/k3_std"] == pytest.approx(0.2081 / 0.0274, rel=0.05)


@pytest.mark.parametrize("garbage", [math.nan, math.inf, -math.inf, 3e38, -7.0],
                         ids=["nan", "inf", "-inf", "huge", "plain"])
def test_masked_padding_never_leaks(garbage):
    """Whatever the padding holds, the vector is bit-identical to the one with clean padding."""
    clean, dirty = seed_batch(B=16, T=300, garbage=0.0), seed_batch(B=16, T=300, garbage=garbage)
    kl = torch.where(clean["mask"] > 0, torch.rand(16, 300), garbage)
    a = stats(**clean, kl=torch.where(clean["mask"] > 0, kl, 0.0))
    b = stats(**dirty, kl=kl)
    assert torch.equal(a, b)
    assert all(math.isfinite(v) for v in token_metrics(b).values())


# ----------------------------------------------------------------------------- merging
def test_micro_batches_combine_to_one_pass(seed_tokens):
    """Sums, counts, minima and maxima merged over uneven micro-batches equal one pass over the whole."""
    whole = stats(**seed_tokens)
    cuts = [0, 1, 40, 41, 125]
    parts = [stats(**{k: v[a:b] for k, v in seed_tokens.items()}) for a, b in zip(cuts, cuts[1:], strict=False)]
    merged = parts[0]
    for p in parts[1:]:
        merged = combine_token_stats(merged, p)
    torch.testing.assert_close(merged, whole, rtol=1e-12, atol=0)
    torch.testing.assert_close(TOKEN_LAYOUT.reduce(torch.stack(parts)), whole, rtol=1e-12, atol=0)


def test_empty_micro_batch_is_the_identity(seed_tokens):
    """A micro-batch with no valid tokens (or no rows) changes nothing."""
    whole = stats(**seed_tokens)
    none_valid = stats(**dict(seed_tokens, mask=torch.zeros_like(seed_tokens["mask"])))
    no_rows = stats(**{k: v[:0] for k, v in seed_tokens.items()})
    for empty in (none_valid, no_rows):
        assert torch.equal(combine_token_stats(whole, empty), whole)
    assert token_metrics(no_rows) == {"grpo/tokens/valid": 0.0, "grpo/tokens/rows": 0.0,
                                      "grpo/tokens/mask_nonbinary": 0.0}


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 6), T=st.integers(1, 9), split=st.integers(0, 6), seed=st.integers(0, 10_000),
       row_adv=st.booleans(), p_valid=st.sampled_from([0.0, 0.3, 1.0]))
def test_random_batches_match_reference_and_merge(B, T, split, seed, row_adv, p_valid):
    """Random shapes, masks, garbage padding and advantage layouts: reference agreement and split invariance."""
    rng = np.random.default_rng(seed)
    mask = (rng.random((B, T)) < p_valid).astype(np.float32)
    x = {k: rng.normal(-1, 1, (B, T)).astype(np.float32) for k in ("logprobs", "ref_logprobs", "old_logprobs", "kl")}
    x["advantages"] = rng.normal(size=B).astype(np.float32) if row_adv else rng.normal(size=(B, T)).astype(np.float32)
    for v in x.values():
        if v.ndim == 2:
            v[mask == 0] = rng.choice([np.nan, np.inf, 1e30])
    x = {k: torch.from_numpy(v) for k, v in x.items()}
    whole = stats(torch.from_numpy(mask), **x)
    want = reference_metrics(mask, **{k: v.numpy() for k, v in x.items()})
    assert_metrics_close(token_metrics(whole), want, rtol=1e-5)
    s = min(split, B)
    head = stats(torch.from_numpy(mask[:s]), **{k: v[:s] for k, v in x.items()})
    tail = stats(torch.from_numpy(mask[s:]), **{k: v[s:] for k, v in x.items()})
    torch.testing.assert_close(combine_token_stats(head, tail), whole, rtol=1e-12, atol=1e-300)


# ----------------------------------------------------------------------------- invariants
def test_row_spread_detects_a_non_constant_row():
    """One valid token off its row's advantage sets the spread; the same change on padding does not."""
    mask = torch.ones(4, 10)
    mask[:, 7:] = 0
    adv = torch.tensor([0.5, -1.0, 0.0, 2.0])[:, None].repeat(1, 10)
    assert stats(mask, advantages=adv)[TOKEN_INDEX["adv_row_spread_max"]] == 0.0
    on_padding = adv.clone()
    on_padding[1, 8] = 100.0
    assert stats(mask, advantages=on_padding)[TOKEN_INDEX["adv_row_spread_max"]] == 0.0
    on_token = adv.clone()
    on_token[3, 2] = 2.3
    assert stats(mask, advantages=on_token)[TOKEN_INDEX["adv_row_spread_max"]].item() == pytest.approx(0.3, rel=1e-6)


def test_row_advantages_broadcast_and_live_fraction():
    """(B,) advantages count once per valid token; rows with advantage 0 are not live."""
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    adv = torch.tensor([0.5, 0.0, -2.0, float("nan")])  # the empty row's NaN must not leak
    m = token_metrics(stats(mask, advantages=adv))
    assert m["grpo/tokens/live_fraction"] == pytest.approx(4 / 6)
    assert m["grpo/tokens/adv_abs_mean"] == pytest.approx((3 * 0.5 + 2.0) / 6)
    assert m["grpo/tokens/adv_row_spread_max"] == 0.0
    assert m["grpo/tokens/response_length_mean"] == pytest.approx(2.0)
    assert m == token_metrics(stats(mask, advantages=adv[:, None].expand(4, 4)))


def test_nonbinary_mask_and_nonfinite_logprobs_are_counted():
    """Mask entries other than 0/1 and non-finite log-probs on valid tokens (any of the three) are counted."""
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.5, 2.0, float("nan"), 1.0]])
    lp, ref, old = torch.full((2, 4), -1.0), torch.full((2, 4), -1.2), torch.full((2, 4), -0.9)
    lp[0, 0], ref[0, 1], old[1, 1] = -math.inf, math.nan, math.inf
    lp[0, 3] = math.nan  # padding: not counted
    v = TOKEN_LAYOUT.to_dict(stats(mask, logprobs=lp, ref_logprobs=ref, old_logprobs=old).tolist())
    assert v["mask_nonbinary"] == 3 and v["valid_tokens"] == 6
    assert v["logprob_nonfinite"] == 3


@pytest.mark.parametrize("clip_range", [(0.2, 0.2), (0.2, 0.28), (0.0, 0.0), (1.0, 3.0)], ids=str)
def test_clip_fraction_and_ratio(clip_range):
    """Fraction of valid tokens with ratio outside [1 - low, 1 + high], mean ratio, max |log ratio|."""
    rng = np.random.default_rng(1)
    lr = rng.normal(0, 0.3, (64, 50))
    bounds = np.log([max(1 - clip_range[0], 1e-30), 1 + clip_range[1]])
    lr[np.abs(lr[..., None] - bounds).min(-1) < 1e-4] = 0.01  # no ties with a bound at float32 rounding
    old = rng.uniform(-5, -0.1, lr.shape).astype(np.float32)
    lp = (old + lr).astype(np.float32)
    mask = (rng.random(lr.shape) < 0.7).astype(np.float32)
    got = token_metrics(stats(torch.from_numpy(mask), logprobs=torch.from_numpy(lp), old_logprobs=torch.from_numpy(old),
                              clip_range=clip_range))
    want = reference_metrics(mask, logprobs=lp, old_logprobs=old, clip_range=clip_range)
    assert_metrics_close(got, want)
    assert 0 <= got["grpo/ratio/clip_frac"] <= 1


def test_ratio_of_four_known_tokens():
    """Ratios 0.7, 0.9, 1.1, 1.3 with clip (0.2, 0.2): half are clipped."""
    old = torch.zeros(1, 4)
    lp = torch.log(torch.tensor([[0.7, 0.9, 1.1, 1.3]]))
    m = token_metrics(stats(torch.ones(1, 4), logprobs=lp, old_logprobs=old))
    assert m["grpo/ratio/clip_frac"] == 0.5
    assert m["grpo/ratio/mean"] == pytest.approx(1.0, rel=1e-6)
    assert m["grpo/ratio/log_abs_max"] == pytest.approx(-math.log(0.7), rel=1e-6)


def test_user_kl_agreement_and_clamp_fraction():
    """A trainer's clamped k3 agrees with ours below the bound; the clamp fraction counts tokens at a bound."""
    rng = np.random.default_rng(2)
    lp = rng.uniform(-6, 0, (32, 40)).astype(np.float32)
    ref = (lp + rng.normal(0, 1.2, lp.shape)).astype(np.float32)
    u = ref.astype(np.float64) - lp
    user = np.clip(np.expm1(u) - u, -1.0, 1.0).astype(np.float32)
    mask = (rng.random(lp.shape) < 0.8).astype(np.float32)
    x = dict(logprobs=lp, ref_logprobs=ref, kl=user)
    for clamp in [(-1.0, 1.0), None]:
        tensors = {k: torch.from_numpy(v) for k, v in x.items()}
        got = token_metrics(stats(torch.from_numpy(mask), kl_clamp=clamp, **tensors))
        assert_metrics_close(got, reference_metrics(mask, kl_clamp=clamp, **x), rtol=1e-5, atol=1e-6)
    assert 0.05 < got["grpo/kl/user_k3_max_abs_diff"]
    frac = token_metrics(stats(torch.from_numpy(mask), kl_clamp=(-1.0, 1.0), kl=torch.from_numpy(user)))
    assert frac["grpo/kl/user_clamp_frac"] == pytest.approx(((user >= 1.0) & (mask > 0)).sum() / (mask > 0).sum())
    assert "grpo/kl/user_k3_max_abs_diff" not in frac


@pytest.mark.parametrize("given", [(), ("advantages",), ("logprobs",), ("logprobs", "ref_logprobs"),
                                   ("logprobs", "old_logprobs"), ("kl",), NAMES], ids=lambda g: "+".join(g) or "mask")
def test_absent_inputs_give_no_keys(given):
    """Each group of keys appears exactly when its inputs were passed."""
    x = {k: torch.full((3, 5), -0.5) for k in given}
    got = token_metrics(stats(torch.ones(3, 5), **x))
    want = reference_metrics(np.ones((3, 5)), **{k: v.numpy() for k, v in x.items()})
    assert set(got) == set(want)


def test_metrics_accept_host_floats(seed_tokens):
    """token_metrics takes the reduced vector as a tensor or as a list of floats, and checks its length."""
    v = stats(**seed_tokens)
    assert token_metrics(v.tolist()) == token_metrics(v)
    with pytest.raises(ValueError, match="stats has 3 entries but TOKEN_FIELDS has"):
        token_metrics([1.0, 2.0, 3.0])


# ----------------------------------------------------------------------------- precision and dtypes
def test_float32_accumulation_holds_at_four_million_tokens():
    """Means and stds over 4M float32 tokens agree with float64 to ~1e-6 (per-row float32, rows in float64)."""
    x = seed_batch(B=1024, T=4096, p_valid=0.9, seed=3)
    got = token_metrics(stats(**x))
    want = reference_metrics(**{k: v.numpy() for k, v in x.items()})
    assert_metrics_close(got, want, rtol=2e-6, atol=1e-9, std_slack=False)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16], ids=str)
def test_other_float_dtypes(dtype):
    """float64 inputs are reduced in float64; half-precision inputs are upcast to float32 before any arithmetic."""
    x = seed_batch(B=8, T=64, seed=4)
    y = {k: v.to(dtype) for k, v in x.items()}
    want = reference_metrics(**{k: v.double().numpy() for k, v in y.items()})
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    assert_metrics_close(token_metrics(stats(**y)), want, rtol=tol, atol=tol * 1e-2)


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.int64, torch.uint8, torch.float16], ids=str)
def test_mask_dtypes(mask_dtype):
    """Bool, integer and half masks select the same tokens as a float mask."""
    x = seed_batch(B=8, T=64, seed=5)
    assert torch.equal(stats(**dict(x, mask=x["mask"].to(mask_dtype))), stats(**x))


def test_no_host_sync_or_data_dependent_shapes():
    """Under FakeTensorMode any .item(), boolean indexing or branch on a value would raise."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        m, x = torch.ones(4, 8), torch.zeros(4, 8)
        validate_token_inputs(m, advantages=torch.zeros(4), logprobs=x, ref_logprobs=x, old_logprobs=x, kl=x)
        v = stats(m, advantages=torch.zeros(4), logprobs=x, ref_logprobs=x, old_logprobs=x, kl=x)
        assert v.shape == (len(TOKEN_FIELDS),) and v.dtype == torch.float64
        with pytest.raises(Exception):  # noqa: B017 - whichever error FakeTensorMode raises for a dynamic shape
            x[m > 0]  # the check works: boolean indexing is data-dependent


# ----------------------------------------------------------------------------- compiled path
def _reset_compile_state(monkeypatch):
    """Fresh compile state, and the C kernel off: these tests are about the torch.compile path."""
    monkeypatch.setenv("GRPO_MONITOR_NATIVE", "0")
    monkeypatch.setattr(backends.COMPILED, "broken", False)
    monkeypatch.setattr(backends.COMPILED, "kernels", {})


@pytest.mark.slow  # a cold torch.compile build: ~45 s on 2 cores
@pytest.mark.timeout(600)
def test_compiled_path_agrees_with_eager_and_does_not_recompile(monkeypatch):
    """torch.compile and eager give the same statistics; a new (B, T) reuses the compiled kernel."""
    pytest.importorskip("torch._inductor")
    from torch._dynamo.utils import counters

    monkeypatch.delenv("GRPO_MONITOR_COMPILE", raising=False)
    _reset_compile_state(monkeypatch)
    x = seed_batch(B=40, T=300, seed=6)
    x["kl"] = torch.where(x["mask"] > 0, torch.rand(40, 300), math.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a silent fallback to eager would pass otherwise
        for B, T in [(40, 300), (17, 123), (40, 300)]:
            y = {k: v[:B, :T] for k, v in x.items()}
            compiled, eager = token_sufficient_stats(**y, compile=True), stats(**y)
            exact = [i for i, (n, op) in enumerate(TOKEN_FIELDS) if op != "sum" or n.endswith(("tokens", "nonbinary"))]
            torch.testing.assert_close(compiled[exact], eager[exact], rtol=0, atol=1e-6)
            torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-6, equal_nan=True)
            if (B, T) == (40, 300):
                graphs = counters["stats"]["unique_graphs"]
    assert graphs >= 1, "nothing was compiled"
    assert counters["stats"]["unique_graphs"] == graphs, "a new shape recompiled the kernel"
    assert not backends.COMPILED.broken


def test_compile_failure_warns_once_and_falls_back(monkeypatch):
    """A backend that fails at first call: one RuntimeWarning, eager results, no further attempts."""
    monkeypatch.delenv("GRPO_MONITOR_COMPILE", raising=False)
    _reset_compile_state(monkeypatch)
    calls = []

    def broken_compile(fn, **kw):
        calls.append(kw)

        def run(*args):
            raise RuntimeError("no C++ compiler")
        return run

    monkeypatch.setattr(torch, "compile", broken_compile)
    x = seed_batch(B=4, T=16, seed=7)
    with pytest.warns(RuntimeWarning, match="torch.compile of the token statistics failed"):
        first = token_sufficient_stats(**x, compile=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = token_sufficient_stats(**x, compile=True)
    assert torch.equal(first, stats(**x)) and torch.equal(second, first)
    assert len(calls) == 1 and calls[0].get("dynamic") is True


def test_environment_variable_disables_compilation(monkeypatch):
    """GRPO_MONITOR_COMPILE=0 keeps even compile=True eager (torch.compile is never called)."""
    monkeypatch.setenv("GRPO_MONITOR_COMPILE", "0")
    _reset_compile_state(monkeypatch)
    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("torch.compile called"))
    x = seed_batch(B=4, T=16, seed=8)
    assert torch.equal(token_sufficient_stats(**x, compile=True), stats(**x))


def test_auto_compiles_only_large_inputs(monkeypatch):
    """compile='auto' leaves small micro-batches eager (a compile costs seconds once)."""
    monkeypatch.delenv("GRPO_MONITOR_COMPILE", raising=False)
    want = backends.wants_compile
    assert want("auto", backends.AUTO_COMPILE_MIN_TOKENS) and not want("auto", 1000)
    assert want(True, 10) and not want(False, 1 << 30)


# ----------------------------------------------------------------------------- validation
M = torch.ones(8, 16)
BAD = [
    pytest.param(M, dict(logprobs=torch.zeros(8, 12)), ValueError,
                 "logprobs has shape (8, 12) but mask has shape (8, 16); pass token tensors aligned with mask",
                 id="shape"),
    pytest.param(M, dict(advantages=torch.zeros(16)), ValueError,
                 "advantages has shape (16,) but mask has shape (8, 16) or (8,)",
                 id="advantages-length"),
    pytest.param(M[0], dict(), ValueError, "mask must be 2-D (B, T), but has shape (16,)", id="mask-1d"),
    pytest.param(M, dict(kl=torch.zeros(8, 16, device="meta")), ValueError, "kl is on meta but mask is on cpu",
                 id="device"),
    pytest.param(M, dict(ref_logprobs=torch.zeros(8, 16, dtype=torch.complex64)), TypeError,
                 "ref_logprobs must hold real numbers (integer or floating dtype), but has dtype torch.complex64",
                 id="complex"),
    pytest.param(M, dict(old_logprobs=torch.zeros(8, 16, dtype=torch.bool)), TypeError,
                 "old_logprobs must hold real numbers",
                 id="bool-values"),
    pytest.param(M, dict(logprobs=np.zeros((8, 16))), TypeError,
                 "logprobs must be a torch.Tensor aligned with mask, but got ndarray",
                 id="numpy"),
    pytest.param([[1, 0]], dict(), TypeError, "mask must be a torch.Tensor of shape (B, T), but got list",
                 id="mask-list"),
    pytest.param(M, dict(logits=torch.zeros(8, 16)), TypeError, "unexpected token tensor 'logits'", id="unknown-name"),
]


@pytest.mark.parametrize("mask, tensors, error, message", BAD)
def test_validation_names_the_argument(mask, tensors, error, message):
    """Worded errors: the argument, what was expected, what came."""
    with pytest.raises(error) as info:
        validate_token_inputs(mask, **tensors)
    assert message in str(info.value)


def test_validation_accepts_aligned_inputs():
    """Aligned (B, T) tensors, (B,) advantages and None are fine."""
    validate_token_inputs(M, advantages=torch.zeros(8), logprobs=torch.zeros(8, 16, dtype=torch.bfloat16),
                          ref_logprobs=None, old_logprobs=torch.zeros(8, 16),
                          kl=torch.zeros(8, 16, dtype=torch.float64))
    validate_token_inputs(M.bool(), advantages=torch.zeros(8, 16, dtype=torch.int32))


@pytest.mark.parametrize("kwargs, message", [
    (dict(clip_range=(-0.1, 0.2)), "clip_range must be (low, high) with both >= 0, but got (-0.1, 0.2)"),
    (dict(clip_range=(0.2,)), "clip_range must be (low, high)"),
    (dict(kl_clamp=(1.0, -1.0)), "kl_clamp must be None or (lo, hi) with lo < hi, but got (1.0, -1.0)"),
    (dict(compile="yes"), "compile must be True, False or 'auto', but got 'yes'"),
], ids=["clip-negative", "clip-length", "clamp-order", "compile"])
def test_bad_options_are_worded(kwargs, message):
    with pytest.raises(ValueError) as info:
        token_sufficient_stats(M, **kwargs)
    assert message in str(info.value)


# ----------------------------------------------------------------------------- polynomial exponentials
def test_fast_exponentials_match_float64():
    """The compiled path's exp(u) - 1 - u and expm1 agree with float64 to ~1e-6 relative, never negative k3."""
    from grpo_monitor.stats.tokens.fast_exp import expm1_fast, k3_fast

    x = torch.cat([torch.linspace(-120, 88, 100_001), torch.linspace(-1, 1, 100_001),
                   torch.tensor([0.0, -1e-30, 1e-8])])
    xd = x.double()
    k3, em1 = k3_fast(x).double(), expm1_fast(x).double()
    torch.testing.assert_close(k3, torch.expm1(xd) - xd, rtol=1e-5, atol=0)  # eager torch ops: no fused multiply-add
    torch.testing.assert_close(em1, torch.expm1(xd), rtol=1e-5, atol=1e-6)
    assert (k3 >= 0).all()
    big = k3_fast(torch.tensor([89.0, 1e5, -1e5]))
    assert big[:2].isinf().all() and big[2].item() == pytest.approx(1e5 - 1, rel=1e-6)


@pytest.mark.slow  # a cold torch.compile build: 15-50 s on 2 cores
@pytest.mark.timeout(600)
def test_compiled_path_matches_float64_reference(monkeypatch):
    """The compiled pass (polynomial exponentials, float32 per-lane row sums) agrees with float64 at 1M tokens.

    Its row sums run sequentially per vector lane (the eager sum is pairwise), so it gets 1e-5, not 2e-6."""
    pytest.importorskip("torch._inductor")
    monkeypatch.delenv("GRPO_MONITOR_COMPILE", raising=False)
    _reset_compile_state(monkeypatch)
    x = seed_batch(B=256, T=4096, p_valid=0.9, seed=9)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = token_metrics(token_sufficient_stats(**x, compile=True))
    want = reference_metrics(**{k: v.numpy() for k, v in x.items()})
    assert_metrics_close(got, want, rtol=1e-5, atol=1e-6, std_slack=False)
