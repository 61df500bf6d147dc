"""The Triton token kernel against the float64 references and the torch form, slot by slot.

Each case runs on ``cpu`` under Triton's interpreter (only in a process started with
``TRITON_INTERPRET=1``: ``test_tokens_triton_interpreted.py`` starts one and runs this file's
``cpu`` cases there) and on ``cuda`` where a GPU and ``triton`` are present; elsewhere a case
skips with its reason. The references are the other token tests' own: ``reference_slots`` of
``test_tokens_native`` (float64 numpy, every five-input slot) and of ``test_tokens_native_sampler``
(every ``mm_*``, ``ent_*``, ``nll_*`` slot, the |Delta| histogram binned with ``np.searchsorted``),
and the eager torch form for non-finite values (NaN-propagating extrema, the non-finite count).
Batches are small: the interpreter runs each operation of each row in numpy (~0.3 s a row).
"""

from __future__ import annotations

import importlib.util
import math
import os
import warnings

import pytest
import test_tokens_is_weights as is_weights
import test_tokens_native as five
import test_tokens_native_sampler as seven
import torch
from test_tokens_native import assert_agrees

from grpo_monitor.stats.tokens import TOKEN_FIELDS, backends, token_inputs
from grpo_monitor.stats.tokens.table import VALUE_INPUTS

HAVE_TRITON = importlib.util.find_spec("triton") is not None
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
INDEX = {name: i for i, (name, _) in enumerate(TOKEN_FIELDS)}


@pytest.fixture(params=["cpu", "cuda"])
def device(request) -> str:
    """Where the kernel runs: the interpreter on CPU tensors, or a GPU."""
    if not HAVE_TRITON:
        pytest.skip("triton is not installed (pip install grpo-monitor[test] on Linux)")
    if request.param == "cpu" and not INTERPRETED:
        pytest.skip("needs TRITON_INTERPRET=1 before triton imports: test_tokens_triton_interpreted.py runs it")
    if request.param == "cuda" and (INTERPRETED or not torch.cuda.is_available()):
        pytest.skip("no CUDA device" if not INTERPRETED else "interpreted process: CPU cases only")
    return request.param


def run_triton(x: dict, device: str, **options) -> torch.Tensor:
    """The Triton backend on ``x`` moved to ``device``, failing (not falling back) should it decline or warn."""
    inputs = token_inputs(**{k: v.to(device) for k, v in x.items()}, **options)
    assert backends.TRITON.accepts(inputs), "the Triton backend declined"
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="grpo-monitor", category=RuntimeWarning)
        return backends.TRITON.run(inputs).cpu()


def eager(x: dict, **options) -> torch.Tensor:
    return backends.EAGER.run(token_inputs(**x, **options))


# ----------------------------------------------------------------------------- the five inputs: every slot
FIVE = [(2, 15), (1, 15), (None, 9), (1, 6), (2, 1), (None, 0)]  # advantages (B, T) / (B,) / none; input subsets


@pytest.mark.parametrize("adv, others", FIVE, ids=lambda v: str(v))
def test_every_slot_of_the_five_inputs(device, adv, others):
    """Masks of several dtypes, a row without tokens, non-binary entries, NaN / inf / huge padding: every slot equals
    the float64 reference (counts and extrema exactly, sums to float32 accumulation) and the torch form."""
    seed = five.CASES.index((adv, others, torch.float32))
    x = five.case_inputs(adv, others, torch.float32, seed)
    clamp = five.CLAMP if seed % 2 else None
    got = run_triton(x, device, clip_range=five.CLIP, kl_clamp=clamp)
    five.assert_slots(got, five.reference_slots(x, clamp), 2e-5, "triton")
    assert_agrees(got, eager(x, clip_range=five.CLIP, kl_clamp=clamp))


# ----------------------------------------------------------------------------- seven inputs: every sampler slot
@pytest.mark.parametrize("combo", ["sampler+old+lp+entropy", "sampler+lp", "entropy-alone"])
def test_every_sampler_slot(device, combo):
    """Ragged rows, an empty row, single-token rows, Student-t mismatch: every mm_* / ent_* / nll_* slot equals the
    float64 reference (histogram bins exactly) and every slot the torch form."""
    x = seven.make_batch(5, B=6, T=300, **seven.COMBOS[combo])
    got = run_triton(x, device)
    seven.assert_sampler_slots(got, seven.reference_slots(x))
    assert_agrees(got, eager(x))


@pytest.mark.parametrize("case", ["identical", "on_edges", "huge", "one_token", "band_and_threshold"])
def test_adversarial_batches(device, case):
    """Exact agreement, |Delta| on every histogram edge, +-20 nats, one valid token, values one ulp either side of
    the band and the entropy threshold: every slot as the float64 reference and the torch form."""
    x = {k: v[:5] for k, v in seven._adversarial(case).items()}  # the one valid token of "one_token" is in row 4
    got = run_triton(x, device)
    seven.assert_sampler_slots(got, seven.reference_slots(x))
    assert_agrees(got, eager(x))


@pytest.mark.parametrize("where", ["sampler_nan", "sampler_-inf", "old_inf", "lp_-inf", "ref_nan", "entropy_inf",
                                   "adv_nan", "kl_inf", "lp_huge"])
def test_non_finite_values_on_valid_tokens(device, where):
    """inf / -inf / NaN / 3e38 on a valid token: counted in logprob_nonfinite exactly, NaN-propagating extrema and
    non-finite sums as the torch form's."""
    x = seven.make_batch(26, B=4, T=50, garbage=0.0)
    x.update(advantages=torch.randn(4, 50), ref_logprobs=x["logprobs"] - 0.3, kl=torch.rand(4, 50))
    x["mask"][3] = 1.0
    name, value = where.split("_")
    key = {"sampler": "sampler_logprobs", "old": "old_logprobs", "lp": "logprobs", "ref": "ref_logprobs",
           "entropy": "entropy", "adv": "advantages", "kl": "kl"}[name]
    x[key][3, 7] = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "huge": 3e38}[value]
    got, want = run_triton(x, device), eager(x)
    assert_agrees(got, want)
    assert got[INDEX["logprob_nonfinite"]] == want[INDEX["logprob_nonfinite"]]


# ----------------------------------------------------------------------------- the trainer's is_weights
@pytest.mark.parametrize("case", ["alone", "with-seven-inputs", "nan-on-a-valid-token"])
def test_is_weights_slots(device, case):
    """TRL's truncated importance weights, alone, beside the seven inputs, or NaN on a valid token: the four is_*
    slots equal the float64 reference, every other slot the pass without them."""
    x = is_weights.batch(7, B=6, T=200)
    if case == "alone":
        x = {"mask": x["mask"], "is_weights": x["is_weights"]}
    elif case == "with-seven-inputs":
        x.update(advantages=torch.randn(6, 200), ref_logprobs=x["logprobs"] - 0.2, kl=torch.rand(6, 200),
                 entropy=torch.rand(6, 200))
    else:
        x["is_weights"][3, 0] = math.nan
    got = run_triton(x, device)
    is_weights.assert_slots(got, is_weights.reference(x["mask"], x["is_weights"]), "triton")
    without = run_triton({k: v for k, v in x.items() if k != "is_weights"}, device)
    others = [i for n, i in INDEX.items() if n not in is_weights.SLOTS]
    torch.testing.assert_close(got[others], without[others], rtol=0, atol=0, equal_nan=True)
    assert_agrees(got, eager(x))


# ----------------------------------------------------------------------------- layouts
@pytest.mark.parametrize("side", ["right", "left", "none"])
def test_padded_and_dense_rows(device, side):
    """Right-padded, left-padded (prompt-side padding) and dense rows, with all-masked and single-token rows among
    them: every slot as both float64 references and the torch form."""
    x = seven.make_batch(8, B=6, T=200, garbage=math.inf)
    lens = x["mask"].sum(1).long()
    if side == "left":
        x = {k: v.flip(1).contiguous() for k, v in x.items()}
    elif side == "none":
        x = {k: torch.where(torch.isfinite(v), v, -0.5) for k, v in x.items()}
        x["mask"] = torch.ones_like(x["mask"])
        x["mask"][0] = 0.0  # still one all-masked row
    x["ref_logprobs"] = x["logprobs"] - 0.2
    got = run_triton(x, device, clip_range=five.CLIP)
    seven.assert_sampler_slots(got, seven.reference_slots(x))
    want = five.reference_slots({k: v for k, v in x.items() if k in ("mask", *five.NAMES)}, (-10.0, 10.0))
    for name in [n for n in want if not n.startswith("nll_")]:  # nll_*: the sampler's, in the sampler reference
        value, size = got[INDEX[name]].item(), want.scale.get(name, abs(want[name]))
        assert value == want[name] or abs(value - want[name]) <= 2e-5 * size + 1e-12, f"{name} = {value}, {want[name]}"
    assert_agrees(got, eager(x, clip_range=five.CLIP))
    assert int(lens.min()) == 0 and 1 in lens.tolist()  # the batch holds both kinds of rows


def test_strided_inputs_and_any_grid(device):
    """Transposed views, expanded (B,) advantages and a bool mask are read in place; one program or three (their
    partials merged on the host) give the same slots."""
    x = seven.make_batch(9, B=5, T=64, garbage=0.0)
    x = {k: v.t().contiguous().t() for k, v in x.items()}  # column-major: token stride B
    x["advantages"] = torch.randn(5, 1).expand(5, 64)
    x["mask"] = x["mask"] > 0
    inputs = token_inputs(**{k: v.to(device) for k, v in x.items()})
    assert backends.TRITON.accepts(inputs)
    from grpo_monitor.stats.tokens import triton_kernel
    one, three = (triton_kernel.token_stats(inputs, programs=p).cpu() for p in (1, 3))
    assert_agrees(one, eager(x))
    assert_agrees(three, one)


def test_declines_what_it_does_not_take(device):
    """float64 values go elsewhere (the kernel computes in float32)."""
    x = seven.make_batch(4, B=4, T=16, garbage=0.0)
    inputs = token_inputs(**{k: v.double().to(device) for k, v in x.items()})
    assert not backends.TRITON.accepts(inputs)
    assert backends.select_backend(inputs, compile=True) is not backends.TRITON


# ----------------------------------------------------------------------------- selection (any process)
def test_cpu_tensors_never_select_triton():
    """On CPU tensors the selection never picks Triton (the C kernel or the torch form serve them)."""
    x = token_inputs(torch.ones(4, 8), logprobs=torch.zeros(4, 8), sampler_logprobs=torch.zeros(4, 8))
    assert backends.select_backend(x, compile=True) is not backends.TRITON
    if not INTERPRETED:
        assert not backends.TRITON.accepts(x)


@pytest.mark.skipif(not torch.cuda.is_available() or not HAVE_TRITON, reason="no CUDA device or no triton")
def test_cuda_selects_triton_unless_switched_off(monkeypatch):
    """CUDA tensors with sampler log-probs take Triton; GRPO_MONITOR_TRITON=0 sends them to the other backends."""
    x = token_inputs(torch.ones(4, 8, device="cuda"), logprobs=torch.zeros(4, 8, device="cuda"),
                     sampler_logprobs=torch.zeros(4, 8, device="cuda"))
    assert backends.select_backend(x, compile=True) is backends.TRITON
    monkeypatch.setenv("GRPO_MONITOR_TRITON", "0")
    assert backends.select_backend(x, compile=True) is not backends.TRITON


# ----------------------------------------------------------------------------- the compiled form, without a GPU
VARIANTS = {
    "seven-inputs": {},
    "bool-mask-bf16-row-adv": {"mask": "*i1", "values": "*bf16", "ADV": 1, "SMP": False, "ENT": False,
                               "CLAMP": False, "MASK_BOOL": True},
    "old-alone": {"ADV": 0, "LP": False, "REF": False, "KL": False, "SMP": False},
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("variant", VARIANTS)
def test_kernel_compiles_for_a_gpu(variant):
    """What the interpreter never checks: the kernel lowers through Triton's compiler to a cubin for sm_90 (ptxas
    ships with triton), for several combinations of inputs; the GPU itself is not needed."""
    if not HAVE_TRITON or INTERPRETED:
        pytest.skip("needs triton, outside the interpreter")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from grpo_monitor.stats.tokens import triton_kernel as tk
    flags = dict(VARIANTS[variant])
    mask, values = flags.pop("mask", "*fp32"), flags.pop("values", "*fp32")
    pointers = [i.c_name for i in VALUE_INPUTS]  # the kernel's value pointers and flags are the table's names
    consts = {"ADV": 2, **{p.upper(): True for p in pointers if p != "adv"}, "CLAMP": True,
              "MASK_BOOL": False, "BLOCK": 512, "LANES": tk.LANES, "HIST_LANES": tk.HIST_LANES, **flags}
    scalars = ("clip_lo", "clip_hi", "clamp_lo", "clamp_hi", "band_lo", "band_hi", "ent_low")
    names = tk._token_pass.arg_names
    sig = {n: "constexpr" if n in consts else "*fp64" if n in ("out", "ident") else mask if n == "m"
           else values if n in pointers else "fp32" if n in scalars else "i32"
           for n in names}
    src = ASTSource(fn=tk._token_pass, signature=sig, constexprs={(names.index(k),): v for k, v in consts.items()})
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32))
    assert compiled.asm["cubin"] and ".local" not in compiled.asm["ptx"]  # no local-memory arrays
