"""The C kernel's sampler-side slots (grpo/mismatch/*, grpo/entropy/*) against float64 numpy and the torch form.

Slot by slot, ``reference_slots`` below computes every ``mm_*``, ``ent_*`` and ``nll_*`` slot
from its definition over the valid tokens in float64 numpy (the |Delta| histogram from the
float32 difference the kernel forms, ``np.float32(t - s)``, binned with ``np.searchsorted``),
sharing no code with the kernel; metric by metric, ``tests/sampler_references.py`` gives the
keys. The torch form (eager) is the second reference: on non-finite values every slot,
NaN-propagating extrema and the non-finite count included, must agree with it.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import test_tokens_native
import torch
from test_tokens_mismatch import assert_close, sampler_metrics
from test_tokens_native import assert_agrees, op_args, run_native

from grpo_monitor.stats.tokens import TOKEN_FIELDS, backends, combine_token_stats, token_inputs
from grpo_monitor.stats.tokens import native_build as _native
from grpo_monitor.stats.tokens.arguments import TENSOR_NAMES
from sampler_references import EDGES, mismatch_reference

BAND, LOW = (0.5, 2.0), 0.01
SAMPLER_SLOTS = [n for n, _ in TOKEN_FIELDS if n.startswith(("mm_", "ent_", "nll_"))]
native = test_tokens_native.native  # the fixture: the kernel on, its calls counted


def make_batch(seed: int, B: int = 9, T: int = 1029, scale: float = 0.05, old: bool = True, lp: bool = True,
               sampler: bool = True, entropy: bool = True, garbage: float = math.nan) -> dict:
    """Float32 tensors: ragged rows, an empty row, single-token rows, Student-t mismatch noise of ``scale``
    (importance weights kept 1e-4 away from the band edges), entropies with exact zeros, garbage padding."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, T + 1, (B,), generator=g)
    lens[0], lens[1], lens[2] = 0, 1, 1
    mask = (torch.arange(T)[None] < lens[:, None]).float()
    s = -4 * torch.rand(B, T, generator=g, dtype=torch.float64)
    chi2 = (torch.randn(3, B, T, generator=g, dtype=torch.float64) ** 2).sum(0)
    d = torch.randn(B, T, generator=g, dtype=torch.float64) / (chi2 / 3).sqrt() * scale  # Student-t, 3 dof
    d = d.clamp(-30.0, 30.0)  # exp(d)^2 overflows float32 beyond 44 nats (the torch form's too), float64 not
    for edge in (math.log(BAND[0]), math.log(BAND[1])):
        d = torch.where((d - edge).abs() < 1e-4, d + 3e-4, d)
    x = {"mask": mask}
    if sampler:
        x["sampler_logprobs"] = s
    if old:
        x["old_logprobs"] = s + d
    if lp:
        x["logprobs"] = s + d + (0.01 if old else 0.0)
    if entropy:
        e = 2 * torch.rand(B, T, generator=g, dtype=torch.float64)
        e[3, :7] = 0.0
        x["entropy"] = e
    for k in list(x)[1:]:
        x[k] = torch.where(mask > 0, x[k], garbage).float()
    return x


class Slots(dict):
    """Reference slot values by name, with a scale (sum of |terms|) per sum for its tolerance."""

    def __init__(self) -> None:
        super().__init__()
        self.scale: dict[str, float] = {}
        self.slack: dict[str, float] = {}  # an absolute allowance, for decisions at float32 rounding distance

    def sum(self, name: str, terms: np.ndarray) -> None:
        self[name], self.scale[name] = float(np.sum(terms)), float(np.sum(np.abs(terms)))


def reference_slots(x: dict) -> Slots:
    """Every mm_*, ent_* and nll_* slot from its definition over the valid tokens, in float64 numpy."""
    valid = x["mask"].double().numpy() > 0
    f = {k: v.double().numpy() for k, v in x.items() if k != "mask"}
    v = Slots()
    trainer = f.get("old_logprobs", f.get("logprobs"))
    if "sampler_logprobs" in f and trainer is not None:
        _mismatch_slots(v, valid, trainer, f["sampler_logprobs"])
    sampled = f.get("sampler_logprobs", f.get("old_logprobs"))
    if sampled is not None:
        v["nll_tokens"] = float(valid.sum())
        v.sum("nll_sum", -sampled[valid])
    if "entropy" in f:
        e = f["entropy"][valid]
        v["ent_tokens"], v["ent_low"] = float(e.size), float((e < LOW).sum())
        v.sum("ent_sum", e)
        v.sum("ent_sq_sum", e * e)
    return v


def _mismatch_slots(v: Slots, valid: np.ndarray, trainer: np.ndarray, sampler: np.ndarray) -> None:
    d = trainer[valid] - sampler[valid]
    v["mm_tokens"], v["mm_rows"] = float(d.size), float(valid.any(1).sum())
    for name, terms in (("mm_d_sum", d), ("mm_k3_sum", np.expm1(d) - d), ("mm_abs_sum", np.abs(d)),
                        ("mm_rho_m1_sum", np.expm1(d)), ("mm_rho_m1_sq_sum", np.expm1(d) ** 2),
                        ("mm_mult_m1_sum", np.expm1(np.abs(d)))):
        v.sum(name, terms)
    v["mm_abs_max"] = float(np.abs(d).max()) if d.size else -math.inf
    v["mm_d_min"] = float(d.min()) if d.size else math.inf
    v["mm_d_max"] = float(d.max()) if d.size else -math.inf
    rho = np.exp(d)
    v["mm_outside"] = float(((rho < BAND[0]) | (rho > BAND[1])).sum())
    w = np.array([math.exp(np.mean(trainer[r][valid[r]] - sampler[r][valid[r]]))
                  for r in range(len(valid)) if valid[r].any()])
    v.sum("mm_seq_w_sum", w)
    v.sum("mm_seq_w_sq_sum", w * w)
    kept = np.where((rho < BAND[0]) | (rho > BAND[1]), 0.0, rho)  # token_mask zeroes these
    v.sum("mm_kept_rho_sum", kept)
    v.sum("mm_kept_rho_sq_sum", kept * kept)
    _sequence_mask_slots(v, [trainer[r][valid[r]] - sampler[r][valid[r]] for r in range(len(valid)) if valid[r].any()])
    d32 = np.abs(np.float32(d))  # the float32 difference the kernel bins
    counts = np.bincount(np.searchsorted(EDGES, d32, side="right"), minlength=len(EDGES) + 1)
    for i, c in enumerate(counts):
        v[f"mm_hist_{i}"] = float(c)


def _sequence_mask_slots(v: Slots, rows: list[np.ndarray]) -> None:
    """TRL's sequence_mask: W = exp(sum of a row's d), masked outside the band. A row whose sum lies within the
    float32 rounding of its sum (L x 2^-23 x sum |d|) of a band edge may fall either side: its count and weight
    are the slack those slots allow (the adversarial batches put whole rows there)."""
    sums = np.array([r.sum() for r in rows])
    err = np.array([2.0 ** -23 * r.size * np.abs(r).sum() for r in rows])
    edges = np.log(np.array(BAND))
    out = (sums < edges[0]) | (sums > edges[1])
    ambiguous = np.min(np.abs(sums[:, None] - edges[None]), axis=1) <= err
    big_w = np.exp(sums)
    v["mm_seq_outside"] = float(out.sum())
    v.sum("mm_seq_kept_w_sum", np.where(out, 0.0, big_w))
    v.sum("mm_seq_kept_w_sq_sum", np.where(out, 0.0, big_w) ** 2)
    v.slack.update(mm_seq_outside=float(ambiguous.sum()), mm_seq_kept_w_sum=float(big_w[ambiguous].sum()),
                   mm_seq_kept_w_sq_sum=float((big_w[ambiguous] ** 2).sum()))


def assert_sampler_slots(got: torch.Tensor, want: Slots, rtol: float = 2e-5) -> None:
    """Counts and histogram bins exact, sums within rtol x their scale, extrema within rtol; absent slots at their
    identity."""
    identity = {"sum": 0.0, "min": math.inf, "max": -math.inf}
    for i, (name, op) in enumerate(TOKEN_FIELDS):
        if name not in SAMPLER_SLOTS:
            continue
        value, expected = got[i].item(), want.get(name, identity[op])
        size = want.scale.get(name, abs(expected) if math.isfinite(expected) else 0.0)
        slack = want.slack.get(name, 0.0)
        assert value == expected or abs(value - expected) <= rtol * size + 1e-12 + slack, \
            f"{name} = {value}, expected {expected}"


def numpy_view(x: dict) -> dict:
    return {k: v.double().numpy() for k, v in x.items()}


def assert_keys(got: dict, want: dict, rtol: float = 1e-4, exact_p99: bool = False) -> None:
    """Every key within rtol; p99 within one bin (float32 rounding may move a value across an edge) unless exact;
    the entropy std within 3e-4 of the rms (its float32 sum-of-squares noise, ``readout.token_metrics``)."""
    got, want = dict(got), dict(want)
    if not exact_p99:
        assert got.pop("grpo/mismatch/abs_diff_p99") == pytest.approx(want.pop("grpo/mismatch/abs_diff_p99"), 0.26)
    if "grpo/entropy/std" in want:
        mean, std = want["grpo/entropy/mean"], want.pop("grpo/entropy/std")
        assert abs(got.pop("grpo/entropy/std") - std) <= 3e-4 * math.hypot(mean, std) + 1e-12
    assert_close(got, want, rtol)


def key_reference(x: dict) -> dict[str, float]:
    n = numpy_view(x)
    return mismatch_reference(n["mask"], n["sampler_logprobs"], old=n.get("old_logprobs"), logprobs=n.get("logprobs"),
                              entropy=n.get("entropy"), band=BAND, low=LOW)


# ----------------------------------------------------------------------------- every slot, every combination
COMBOS = {
    "sampler+old+lp+entropy": {}, "sampler+lp": {"old": False}, "sampler+old": {"lp": False},
    "sampler-alone": {"old": False, "lp": False, "entropy": False}, "entropy-alone": {"sampler": False, "old": False,
                                                                                     "lp": False},
    "old+entropy": {"sampler": False, "lp": False},
}


@pytest.mark.parametrize("combo", COMBOS, ids=str)
@pytest.mark.parametrize("T", [7, 16, 1029, 2500], ids=lambda t: f"T{t}")
def test_every_sampler_slot_matches_float64_and_the_torch_form(native, combo, T):
    """Each combination of inputs, tails (T % 8) and several segments per row: every slot equals the float64
    reference (histogram bins and counts exactly) and the torch form."""
    x = make_batch(T, T=T, **COMBOS[combo])
    got = run_native(native, **x)
    assert_sampler_slots(got, reference_slots(x))
    assert_agrees(got, backends.EAGER.run(token_inputs(**x)))


@pytest.mark.parametrize("scale", [0.003, 0.05, 0.5, 3.0], ids=lambda s: f"delta~{s}")
def test_every_key_matches_the_float64_reference(native, scale):
    """Both exponential branches (|Delta| < 0.34 without range reduction, and beyond, mixed within vectors): every
    grpo/mismatch and grpo/entropy key to float32 precision; p99 within one bin of the float64 binning."""
    x = make_batch(40 + int(scale * 10), B=48, T=777, scale=scale)
    assert_keys(sampler_metrics(run_native(native, **x)), key_reference(x))
    assert_sampler_slots(run_native(native, **x), reference_slots(x))


# ----------------------------------------------------------------------------- adversarial batches
def _adversarial(case: str) -> dict:
    x = make_batch(11, B=12, T=300)
    valid = x["mask"] > 0
    s = x["sampler_logprobs"]
    if case == "identical":
        x["old_logprobs"] = s.clone()
    elif case == "on_edges":  # dyadic sampler log-probs: old - sampler is the edge exactly, in float32 too
        edges = torch.tensor(EDGES, dtype=torch.float32)
        signs = torch.where(torch.arange(s.numel()) % 3 == 0, -1.0, 1.0).reshape(s.shape)
        d = edges[torch.arange(s.numel()) % len(edges)].reshape(s.shape)
        d = d * torch.where(d > 40, -1.0, signs)  # exp(64)^2 overflows float32: the last edge from below 0
        x["sampler_logprobs"] = torch.where(valid, torch.round(s * 8) / 8, math.nan)
        x["old_logprobs"] = torch.where(valid, x["sampler_logprobs"] + d, math.nan)
    elif case == "huge":  # 20 nats: exp(d)^2 stays finite in float32 (at 50 it is inf there, not in float64)
        x["old_logprobs"] = s + torch.where(torch.arange(s.shape[1]) % 3 == 0, 20.0, -20.0)
    elif case == "one_token":
        x["mask"] = torch.zeros_like(x["mask"])
        x["mask"][4, 2] = 1.0
    elif case == "band_and_threshold":  # one float32 ulp either side of the float32 band edges and threshold
        lo, hi, low = (np.float32(v) for v in (math.log(BAND[0]), math.log(BAND[1]), LOW))
        d = torch.tensor([np.nextafter(lo, -1), np.nextafter(lo, 1), np.nextafter(hi, -1), np.nextafter(hi, 1)])
        x["sampler_logprobs"] = torch.where(valid, 0.0, math.nan)  # 0 + d is d exactly
        x["old_logprobs"] = x["sampler_logprobs"] + d.repeat(s.shape[1] // 4 + 1)[: s.shape[1]]
        e = torch.tensor([np.nextafter(low, -1), np.nextafter(low, 1)])
        x["entropy"] = e.repeat(s.shape[1] // 2 + 1)[: s.shape[1]].expand_as(s).clone()
    return x


@pytest.mark.parametrize("case", ["identical", "on_edges", "huge", "one_token", "band_and_threshold"])
def test_adversarial_batches(native, case):
    """Exact agreement (k3 and the z-score exactly 0), |Delta| on every histogram edge, +-20 nats (the range
    reduction), a single valid token, importance weights and entropies one ulp either side of the band and the
    threshold: every slot as the float64 reference and the torch form, every key as the float64 reference."""
    x = _adversarial(case)
    got = run_native(native, **x)
    assert_sampler_slots(got, reference_slots(x))
    assert_agrees(got, backends.EAGER.run(token_inputs(**x)))
    keys = sampler_metrics(got)
    assert_keys(keys, key_reference(x), exact_p99=case == "on_edges")  # on the edges |Delta| is exact in float32
    if case == "identical":
        assert keys["grpo/mismatch/k3_mean"] == 0 and keys["grpo/mismatch/ratio_mean_z"] == 0
        assert keys["grpo/mismatch/abs_diff_p99"] == 0 and keys["grpo/mismatch/seq_ess"] == 1


def test_an_empty_mask_gives_no_sampler_key(native):
    """No valid token: every sampler slot at its identity (sums 0, minima +inf, maxima -inf), no key."""
    x = make_batch(5, T=64)
    x["mask"] = torch.zeros_like(x["mask"])
    got = run_native(native, **x)
    assert_sampler_slots(got, reference_slots(x))
    assert sampler_metrics(got) == {}


@pytest.mark.parametrize("garbage", [math.nan, math.inf, -math.inf, -3e38, 5.0], ids=str)
def test_garbage_in_the_padding_never_leaks(native, garbage):
    """NaN, +-inf or any value off the mask in sampler log-probs and entropies leaves every slot bit for bit as with
    zeros there."""
    clean = run_native(native, **make_batch(27, B=16, T=257, garbage=0.0))
    assert torch.equal(run_native(native, **make_batch(27, B=16, T=257, garbage=garbage)), clean)


@pytest.mark.parametrize("where", ["sampler_nan", "sampler_inf", "sampler_-inf", "old_nan", "old_-inf",
                                   "entropy_nan", "entropy_inf", "sampler_huge"])
def test_non_finite_values_on_valid_tokens(native, where):
    """A non-finite sampler or trainer log-prob on a valid token is counted in logprob_nonfinite exactly and
    propagates into the mismatch extrema as the torch form's amax / amin do; a non-finite entropy into its sums."""
    x = make_batch(26, B=5, T=50, garbage=0.0)
    x["mask"][4] = 1.0  # the poisoned token is valid
    name, value = where.split("_")
    key = {"sampler": "sampler_logprobs", "old": "old_logprobs", "entropy": "entropy"}[name]
    x[key][4, 7] = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "huge": 3e38}[value]
    got, want = run_native(native, **x), backends.EAGER.run(token_inputs(**x))
    assert_agrees(got, want)
    nonfinite = got[[n for n, _ in TOKEN_FIELDS].index("logprob_nonfinite")].item()
    n = numpy_view(x)
    valid = n["mask"] > 0
    lp, old, s = (n[k][valid] for k in ("logprobs", "old_logprobs", "sampler_logprobs"))
    with np.errstate(invalid="ignore"):
        assert nonfinite == float((~np.isfinite(lp - old + (old - s))).sum())


# ----------------------------------------------------------------------------- merging, threads, dtypes
def test_micro_batches_and_threads_merge_to_the_whole(native):
    """Rows split over micro-batches merge (combine_token_stats) to the whole batch's slots; one thread or two give
    the same slots, and the same thread count the same bits."""
    x = make_batch(3, B=20, T=513, scale=0.2)
    whole = run_native(native, **x)
    merged = None
    for a, b in ((0, 3), (3, 4), (4, 13), (13, 20)):
        part = run_native(native, **{k: v[a:b] for k, v in x.items()})
        merged = part if merged is None else combine_token_stats(merged, part)
    assert_agrees(merged, whole)
    assert_sampler_slots(merged, reference_slots(x))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = run_native(native, **x)
    finally:
        torch.set_num_threads(before)
    assert_agrees(one, whole)
    assert torch.equal(run_native(native, **x), whole)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("which", ["sampler_logprobs", "entropy"])
def test_other_dtypes_take_the_eager_pass(native, dtype, which):
    """A bfloat16 or float16 sampler log-prob or entropy tensor beside float32 ones: the kernel declines, the eager
    pass computes the keys of the float64 reference of those rounded values."""
    x = make_batch(29, B=8, T=300, garbage=0.0)
    x[which] = x[which].to(dtype)
    inputs = token_inputs(**x)
    assert not backends.NATIVE.accepts(inputs)
    assert backends.select_backend(inputs, compile=True) is backends.EAGER
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = sampler_metrics(backends.select_backend(inputs, compile=True).run(inputs))
    assert_keys(got, key_reference(x))
    assert native == [], "the kernel was called for inputs it does not take"


# ----------------------------------------------------------------------------- inside torch.compile
def test_custom_op_with_sampler_inputs_passes_opcheck(native):
    """The op with sampler log-probs and entropies: schema, fake (shape and dtype) and results check out."""
    x = make_batch(33, B=8, T=100, garbage=0.0)
    x.update(advantages=torch.randn(8), ref_logprobs=x["logprobs"] - 0.1)
    torch.library.opcheck(backends.native_token_stats, op_args(x))
    assert_agrees(backends.native_token_stats(*op_args(x)), backends.EAGER.run(token_inputs(**x)))


def test_the_slot_count_is_a_constant_of_the_graph(native):
    """A compiled caller's graph holds the op with len(TOKEN_FIELDS) among its arguments, so inductor's cache key
    changes with the field table (a cached graph of the 30-slot table once failed its size check on 141 slots)."""
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def step(mask, lp, s):
        return backends.NATIVE.run(token_inputs(mask, logprobs=lp, sampler_logprobs=s))

    if not backends.NATIVE.accepts(token_inputs(torch.ones(2, 3))):
        pytest.skip("the kernel is not available here")
    torch._dynamo.reset()
    x = make_batch(34, B=4, T=40, entropy=False, old=False, garbage=0.0)
    out = torch.compile(step, backend=capture, fullgraph=True)(x["mask"], x["logprobs"], x["sampler_logprobs"])
    assert out.shape == (len(TOKEN_FIELDS),)
    [node] = [n for gm in graphs for n in gm.graph.nodes if "native_token_stats" in str(n.target)]
    assert node.args[-1] == len(TOKEN_FIELDS)
    args = (x["mask"], *(x.get(name) for name in TENSOR_NAMES), -0.2, 0.2, False, 0.0, 0.0, math.log(0.5),
            math.log(2.0), 0.01)  # the value tensors in the token-input table's order
    with pytest.raises(ValueError, match="slots is 30 but the field table has"):
        backends.native_token_stats(*args, 30)
    assert _native.loaded()
