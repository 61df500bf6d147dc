"""Loss-side token statistics (KL estimators, importance ratios, token invariants) as one vector.

``token_sufficient_stats`` reads the ``(B, T)`` token tensors of one micro-batch once and
returns a float64 vector laid out by ``TOKEN_FIELDS``: sums, counts, minima and maxima
(never means), so micro-batches and ranks merge with ``combine_token_stats`` /
``TOKEN_LAYOUT.reduce`` and ``token_metrics`` turns the merged vector into ``grpo/...``
keys. Only tokens with ``mask > 0`` count; padding may hold NaN, inf or garbage and is
excluded with ``torch.where`` (never multiplied by the mask). With ``u = ref_logprobs -
logprobs``: ``k1 = -u``, ``k2 = u^2 / 2``, ``k3 = exp(u) - u - 1`` (Schulman's estimators).

One fused pass: a single function (``torch.compile``-d when worth it, else run eagerly in
row chunks) reduces every statistic per row in the input precision (float32 for float32
inputs), then across rows in float64. No host sync, no data-dependent shapes. The per-row
pass lives in ``_token_kernel``; compiled, it evaluates both exponentials with an inlined
polynomial (float32), which keeps the whole pass in one vectorised loop. Called from code
that a caller ``torch.compile``-s, the pass becomes part of the caller's graph (see
``_traced_stats``).
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from typing import Callable, NamedTuple, Optional, Sequence

import torch

from . import _native
from ._token_kernel import COMPILE_OPTIONS, row_partials
from .fields import FieldLayout

_TOKEN_TENSORS = ("advantages", "logprobs", "ref_logprobs", "old_logprobs", "kl")

#: Slot name and reduction of every entry of the token statistics vector. ``*_tokens`` count
#: the valid tokens that had the inputs a group of slots needs, so absent inputs give no keys.
TOKEN_FIELDS: tuple[tuple[str, str], ...] = (
    ("valid_tokens", "sum"), ("rows_with_tokens", "sum"), ("mask_nonbinary", "sum"),
    ("adv_tokens", "sum"), ("adv_sum", "sum"), ("adv_abs_sum", "sum"), ("adv_row_spread_max", "max"),
    ("adv_live_tokens", "sum"),
    ("logprob_tokens", "sum"), ("logprob_nonfinite", "sum"),
    ("kl_tokens", "sum"), ("kl_u_sum", "sum"), ("kl_u_sq_sum", "sum"), ("kl_u_quad_sum", "sum"),
    ("kl_u_pos", "sum"), ("kl_u_max", "max"), ("kl_u_min", "min"), ("kl_k3_sum", "sum"), ("kl_k3_sq_sum", "sum"),
    ("user_kl_tokens", "sum"), ("user_kl_sum", "sum"), ("user_kl_sq_sum", "sum"),
    ("user_k3_tokens", "sum"), ("user_k3_absdiff_max", "max"), ("user_clamp_tokens", "sum"), ("user_clamp_hits", "sum"),
    ("ratio_tokens", "sum"), ("ratio_m1_sum", "sum"), ("ratio_clipped", "sum"), ("on_policy_absdiff_max", "max"),
)
TOKEN_LAYOUT = FieldLayout(TOKEN_FIELDS)
#: The reduction of each slot ("sum", "min" or "max"), in ``TOKEN_FIELDS`` order.
TOKEN_REDUCTIONS: tuple[str, ...] = tuple(op for _, op in TOKEN_FIELDS)
TOKEN_INDEX = {name: i for i, (name, _) in enumerate(TOKEN_FIELDS)}
_FIELD_NAMES = tuple(name for name, _ in TOKEN_FIELDS)  # the slot order the C kernel must lay out

#: ``compile="auto"`` compiles only for micro-batches with at least this many token slots
#: (smaller ones take milliseconds eagerly; a compile takes seconds once per process).
AUTO_COMPILE_MIN_TOKENS = 1 << 18
_EAGER_CHUNK = 1 << 15  # elements per eager chunk: temporaries stay far below one input copy
_COMPILED_CHUNK = 1 << 22  # elements per compiled call: bounds memory should a backend materialise
_EMPTY = {"sum": 0.0, "min": math.inf, "max": -math.inf}


class _Spec(NamedTuple):
    """What one kernel variant computes: the inputs present and the constants it compares with."""

    adv_ndim: int  # 0: no advantages, 1: one per row, 2: per token
    logprobs: bool
    ref: bool
    old: bool
    kl: bool
    clip_log: tuple[float, float]  # log(1 - low), log1p(high)
    clamp: tuple[float, float] | None


# ----------------------------------------------------------------------------- validation
def validate_token_inputs(mask: torch.Tensor, **tensors: torch.Tensor | None) -> None:
    """Check shapes, devices and dtypes of the token tensors against ``mask``; no host sync.

    ``advantages`` may be ``(B, T)`` or ``(B,)``; every other tensor must match ``mask``.

    >>> validate_token_inputs(torch.ones(2, 3), logprobs=torch.zeros(2, 3), advantages=torch.zeros(2))
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor of shape (B, T), but got {type(mask).__name__}")
    if mask.dim() != 2:
        raise ValueError(f"mask must be 2-D (B, T), but has shape {tuple(mask.shape)}; pass one row per response")
    _check_dtype("mask", mask, allow_bool=True)
    for name, t in tensors.items():
        if t is None:
            continue
        if name not in _TOKEN_TENSORS:
            raise TypeError(f"unexpected token tensor {name!r}; expected some of {list(_TOKEN_TENSORS)}")
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor aligned with mask, but got {type(t).__name__}")
        _check_dtype(name, t, allow_bool=False)
        row_adv = name == "advantages" and tuple(t.shape) == tuple(mask.shape[:1])
        if tuple(t.shape) != tuple(mask.shape) and not row_adv:
            also = f" or ({mask.shape[0]},)" if name == "advantages" else ""
            raise ValueError(f"{name} has shape {tuple(t.shape)} but mask has shape {tuple(mask.shape)}{also}; "
                             f"pass token tensors aligned with mask")
        if t.device != mask.device:
            raise ValueError(f"{name} is on {t.device} but mask is on {mask.device}; pass all token tensors on one device")


def _check_dtype(name: str, t: torch.Tensor, allow_bool: bool) -> None:
    if t.is_complex() or (t.dtype == torch.bool and not allow_bool):
        kinds = "bool, integer or floating" if allow_bool else "integer or floating"
        raise TypeError(f"{name} must hold real numbers ({kinds} dtype), but has dtype {t.dtype}")


def _check_options(clip_range: Sequence[float], kl_clamp: Sequence[float] | None) -> None:
    if len(clip_range) != 2 or min(clip_range) < 0:
        raise ValueError(f"clip_range must be (low, high) with both >= 0, but got {tuple(clip_range)}")
    if kl_clamp is not None and (len(kl_clamp) != 2 or not kl_clamp[0] < kl_clamp[1]):
        raise ValueError(f"kl_clamp must be None or (lo, hi) with lo < hi, but got {tuple(kl_clamp)}")


# ----------------------------------------------------------------------------- the fused pass
def token_sufficient_stats(
    mask: torch.Tensor, *, advantages: torch.Tensor | None = None, logprobs: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None, old_logprobs: torch.Tensor | None = None, kl: torch.Tensor | None = None,
    clip_range: Sequence[float] = (0.2, 0.2), kl_clamp: Sequence[float] | None = (-10.0, 10.0),
    compile: bool | str = "auto",
) -> torch.Tensor:
    """Sufficient statistics of one micro-batch, a float64 vector laid out by ``TOKEN_FIELDS``.

    Empty sums are 0, empty minima +inf, empty maxima -inf. ``compile``: ``"auto"`` (compile
    large inputs unless ``GRPO_MONITOR_COMPILE=0``), ``True`` or ``False``; a failed compile
    warns once and the process continues eagerly. Compiled on an AVX2 CPU, contiguous float32
    inputs take the C kernel of ``_native`` (same statistics, one pass, ~1.4x the cost of
    reading the inputs); anything else takes ``torch.compile``. Call ``validate_token_inputs`` first for
    worded errors (it is checked again here: metadata only, no sync).

    >>> v = token_sufficient_stats(torch.tensor([[1, 1, 0]]), logprobs=torch.tensor([[-1., -2., float("nan")]]),
    ...                            ref_logprobs=torch.tensor([[-1., -1., 0.]]))
    >>> v[TOKEN_INDEX["valid_tokens"]].item(), v[TOKEN_INDEX["kl_u_sum"]].item()
    (2.0, 1.0)
    """
    validate_token_inputs(mask, advantages=advantages, logprobs=logprobs, ref_logprobs=ref_logprobs,
                          old_logprobs=old_logprobs, kl=kl)
    _check_options(clip_range, kl_clamp)
    if compile not in (True, False, "auto"):
        raise ValueError(f"compile must be True, False or 'auto', but got {compile!r}")
    low, high = float(clip_range[0]), float(clip_range[1])
    spec = _Spec(
        adv_ndim=0 if advantages is None else advantages.dim(), logprobs=logprobs is not None,
        ref=ref_logprobs is not None, old=old_logprobs is not None, kl=kl is not None,
        clip_log=(math.log(1.0 - low) if low < 1.0 else -math.inf, math.log1p(high)),
        clamp=None if kl_clamp is None else (float(kl_clamp[0]), float(kl_clamp[1])),
    )
    B, T = mask.shape
    if B * T == 0:
        return _empty_vector(mask.device)
    compiled = _use_compile(compile, B * T)
    inputs = (advantages, logprobs, ref_logprobs, old_logprobs, kl)
    native = compiled and _native.enabled() and _native.accepts(mask, inputs)
    with torch.no_grad():
        if _is_compiling():
            return _traced_stats(spec, native, compiled, mask, inputs)
        vec = _native.token_stats(mask, *inputs, spec.clip_log, spec.clamp, _FIELD_NAMES) if native else None
        return vec if vec is not None else _chunked_stats(spec, compiled, mask, inputs)


def _chunked_stats(spec: _Spec, compiled: bool, mask: torch.Tensor, inputs: tuple) -> torch.Tensor:
    """The torch kernel over row blocks (bounded temporaries), compiled or eager, blocks merged."""
    B, T = mask.shape
    rows = max(1, (_COMPILED_CHUNK if compiled else _EAGER_CHUNK) // T)
    out = None
    for start in range(0, B, rows):
        part = [None if t is None else t[start:start + rows] for t in (mask, *inputs)]
        vec = _run_compiled(spec, part) if compiled else _token_kernel(spec, *part)
        out = vec if out is None else TOKEN_LAYOUT.combine(out, vec)
    return out


_COMPILE_STATE = {"broken": False}
_COMPILED: dict[_Spec, Callable] = {}
_EMPTY_VECTORS: dict[torch.device, torch.Tensor] = {}


def _empty_vector(device: torch.device) -> torch.Tensor:
    """The statistics of no tokens; cached per device (building it from a list is a host-to-device copy)."""
    if device not in _EMPTY_VECTORS:
        _EMPTY_VECTORS[device] = TOKEN_LAYOUT.empty(device)
    return _EMPTY_VECTORS[device].clone()


def _use_compile(compile: bool | str, numel: int) -> bool:
    """Whether this call takes the compiled path (never after a failure or with GRPO_MONITOR_COMPILE=0)."""
    wanted = compile is True or (compile == "auto" and numel >= AUTO_COMPILE_MIN_TOKENS)
    return wanted and not _COMPILE_STATE["broken"] and os.environ.get("GRPO_MONITOR_COMPILE", "1") != "0"


def _compiled_kernel(spec: _Spec) -> Callable:
    """One lazily compiled kernel per input combination, dynamic shapes (a new (B, T) does not recompile).

    The variants share one code object, hence dynamo's recompile limit (8): beyond it dynamo runs it eagerly.
    """
    if spec not in _COMPILED:
        def kernel(mask, adv, lp, ref, old, kl):
            return _token_kernel(spec, mask, adv, lp, ref, old, kl, fast=True)

        _COMPILED[spec] = torch.compile(kernel, dynamic=True, options=COMPILE_OPTIONS)
    return _COMPILED[spec]


def _run_compiled(spec: _Spec, part: list) -> torch.Tensor:
    """The compiled kernel; any compile failure warns once and switches the process to eager."""
    try:
        with torch._dynamo.config.patch(specialize_float=True):  # constants as literals, not scalar tensor inputs
            return _compiled_kernel(spec)(*part)
    except Exception as exc:  # noqa: BLE001 - whatever the backend raises, stay correct
        _COMPILE_STATE["broken"] = True
        warnings.warn(f"grpo-monitor: torch.compile of the token statistics failed ({type(exc).__name__}: "
                      f"{str(exc)[:200]}); using the eager path for the rest of the process", RuntimeWarning, stacklevel=3)
        return _token_kernel(spec, *part)


def _is_compiling() -> bool:
    """Whether Dynamo is tracing this call (torch < 2.3 lacks ``torch.compiler.is_compiling``)."""
    if hasattr(torch.compiler, "is_compiling"):
        return torch.compiler.is_compiling()
    dynamo = sys.modules.get("torch._dynamo")  # never imported: nothing can be compiling
    return dynamo is not None and dynamo.is_compiling()


def _traced_stats(spec: _Spec, native: bool, compiled: bool, mask: torch.Tensor, inputs: tuple) -> torch.Tensor:
    """The statistics while Dynamo traces a caller's ``torch.compile``-d code (``fullgraph`` or not).

    Dynamo must never trace into the ``ctypes`` call (it did: the process aborted with a
    corrupted heap), and a nested ``torch.compile`` of the monitor's kernel inside another
    compile is a graph break at best. So the C kernel enters the caller's graph as the custom
    op ``grpo_monitor::native_token_stats``, opaque to Dynamo (a fake gives the vector's
    shape), and every other path traces the pure-torch kernel inline, compiled with the
    caller's graph. Not ``torch.compiler.disable``: under ``fullgraph=True`` Dynamo refuses
    to call a disabled function (torch 2.13: "Skip inlining ``torch.compiler.disable()``d
    function"), while an op is a node of the one graph either way.
    """
    if native and native_token_stats is not None:
        clamp = spec.clamp if spec.clamp is not None else (0.0, 0.0)
        return native_token_stats(mask, *inputs, spec.clip_log[0], spec.clip_log[1], spec.clamp is not None, *clamp)
    return _token_kernel(spec, mask, *inputs, fast=compiled)


def _native_op(mask: torch.Tensor, adv: Optional[torch.Tensor], lp: Optional[torch.Tensor],
               ref: Optional[torch.Tensor], old: Optional[torch.Tensor], kl: Optional[torch.Tensor],
               clip_lo: float, clip_hi: float, has_clamp: bool, clamp_lo: float, clamp_hi: float) -> torch.Tensor:
    """The C kernel as an operator; the eager kernel should the library be unavailable (an op must return).

    Called only from compiled graphs: a custom op's first call costs about a second of
    dispatcher set-up, which eager callers skip by calling ``_native.token_stats`` directly.
    """
    clamp = (clamp_lo, clamp_hi) if has_clamp else None
    vec = _native.token_stats(mask, adv, lp, ref, old, kl, (clip_lo, clip_hi), clamp, _FIELD_NAMES)
    if vec is not None:
        return vec
    spec = _Spec(adv_ndim=0 if adv is None else adv.dim(), logprobs=lp is not None, ref=ref is not None,
                 old=old is not None, kl=kl is not None, clip_log=(clip_lo, clip_hi), clamp=clamp)
    return _chunked_stats(spec, False, mask, (adv, lp, ref, old, kl))


def _native_op_fake(mask, adv, lp, ref, old, kl, clip_lo, clip_hi, has_clamp, clamp_lo, clamp_hi) -> torch.Tensor:
    """What the op returns, for tracing: an empty float64 vector, one slot per ``TOKEN_FIELDS`` entry."""
    return mask.new_empty(len(TOKEN_FIELDS), dtype=torch.float64)


def _register_native_op():
    """``grpo_monitor::native_token_stats``; ``None`` before torch 2.4 (compiled callers then trace the torch kernel)."""
    if not hasattr(torch.library, "custom_op"):
        return None
    op = torch.library.custom_op("grpo_monitor::native_token_stats", mutates_args=(), device_types="cpu")(_native_op)
    op.register_fake(_native_op_fake)
    return op


native_token_stats = _register_native_op()


def _token_kernel(spec: _Spec, mask, adv, lp, ref, old, kl, fast: bool = False) -> torch.Tensor:
    """Every statistic of one row block: per-row partials in the compute dtype, rows merged in float64."""
    return _assemble(*row_partials(spec, mask, adv, lp, ref, old, kl, fast=fast))


def _assemble(parts: dict[str, torch.Tensor], cnt: torch.Tensor) -> torch.Tensor:
    """Merge the per-row partials across rows in float64, in ``TOKEN_FIELDS`` order."""
    by_op: dict[str, list[str]] = {"sum": [], "min": [], "max": []}
    for name, op in TOKEN_FIELDS:
        if name in parts:
            by_op[op].append(name)
    merged: dict[str, torch.Tensor] = {}
    for op, names in by_op.items():
        if not names:
            continue
        stacked = torch.stack([parts[n] for n in names]).to(torch.float64)
        red = stacked.sum(1) if op == "sum" else stacked.amin(1) if op == "min" else stacked.amax(1)
        merged.update({n: red[i] for i, n in enumerate(names)})
    fill = {op: torch.full((), v, dtype=torch.float64, device=cnt.device) for op, v in _EMPTY.items()}
    return torch.stack([merged[name] if name in merged else fill[op] for name, op in TOKEN_FIELDS])


# ----------------------------------------------------------------------------- merge and report
def combine_token_stats(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Merge two token statistics vectors slot by slot (sum, min or max): micro-batches, ranks.

    >>> m = torch.ones(1, 2)
    >>> combine_token_stats(token_sufficient_stats(m), token_sufficient_stats(m))[0].item()
    4.0
    """
    return TOKEN_LAYOUT.combine(a, b)


def _k3(u: float) -> float:
    """k3 = exp(u) - u - 1 in float64, inf for infinite or overflowing u."""
    if math.isnan(u):
        return math.nan
    if math.isinf(u) or u > 700.0:
        return math.inf
    return max(math.expm1(u) - u, 0.0)


def _mean_std(n: float, s: float, sq: float) -> tuple[float, float]:
    """Population mean and std from a count, a sum and a sum of squares (variance clamped at 0; NaN stays NaN)."""
    mean = s / n
    return mean, math.sqrt(max(sq / n - mean * mean, 0.0))


def _kl_metrics(v: dict[str, float]) -> dict[str, float]:
    n, umax, umin = v["kl_tokens"], v["kl_u_max"], v["kl_u_min"]
    k1 = _mean_std(n, -v["kl_u_sum"], v["kl_u_sq_sum"])
    k2 = _mean_std(n, v["kl_u_sq_sum"] / 2, v["kl_u_quad_sum"] / 4)
    k3 = _mean_std(n, v["kl_k3_sum"], v["kl_k3_sq_sum"])
    out = {}
    for name, (mean, std), neg, top in (
        ("k1", k1, v["kl_u_pos"] / n, -umin),
        ("k2", k2, 0.0, max(umax * umax, umin * umin) / 2),  # u^2 / 2 is never negative
        ("k3", k3, 0.0, max(_k3(umax), _k3(umin))),  # convex: largest at an extreme u; never negative
    ):
        out.update({f"grpo/kl/{name}_mean": mean, f"grpo/kl/{name}_std": std,
                    f"grpo/kl/{name}_neg_frac": neg, f"grpo/kl/{name}_max": top})
    return out


def _user_metrics(v: dict[str, float]) -> dict[str, float]:
    mean, std = _mean_std(v["user_kl_tokens"], v["user_kl_sum"], v["user_kl_sq_sum"])
    out = {"grpo/kl/user_mean": mean, "grpo/kl/user_std": std}
    if v["user_k3_tokens"] > 0:
        out["grpo/kl/user_k3_max_abs_diff"] = v["user_k3_absdiff_max"]
    if v["user_clamp_tokens"] > 0:
        out["grpo/kl/user_clamp_frac"] = v["user_clamp_hits"] / v["user_clamp_tokens"]
    return out


def token_metrics(stats: torch.Tensor | Sequence[float]) -> dict[str, float]:
    """``grpo/kl/*``, ``grpo/ratio/*`` and ``grpo/tokens/*`` from a merged statistics vector.

    Keys of a group appear only when some valid token carried its inputs. Stds come from
    sums of squares accumulated per row in the input precision: for float32 inputs whose
    values are nearly constant they carry noise of up to ~3e-4 x their rms; otherwise the
    relative error is ~1e-6 (mean/std)^2.

    >>> m = token_metrics(token_sufficient_stats(torch.tensor([[1, 1, 0], [0, 0, 0]])))
    >>> m["grpo/tokens/valid"], m["grpo/tokens/response_length_mean"]
    (2.0, 2.0)
    """
    values = stats.tolist() if isinstance(stats, torch.Tensor) else [float(x) for x in stats]
    if len(values) != len(TOKEN_FIELDS):
        raise ValueError(f"stats has {len(values)} entries but TOKEN_FIELDS has {len(TOKEN_FIELDS)}; "
                         f"pass a vector from token_sufficient_stats")
    v = TOKEN_LAYOUT.to_dict(values)
    out = {"grpo/tokens/valid": v["valid_tokens"], "grpo/tokens/rows": v["rows_with_tokens"],
           "grpo/tokens/mask_nonbinary": v["mask_nonbinary"]}
    if v["rows_with_tokens"] > 0:
        out["grpo/tokens/response_length_mean"] = v["valid_tokens"] / v["rows_with_tokens"]
    if v["adv_tokens"] > 0:
        n = v["adv_tokens"]
        out.update({"grpo/tokens/live_fraction": v["adv_live_tokens"] / n, "grpo/tokens/adv_mean": v["adv_sum"] / n,
                    "grpo/tokens/adv_abs_mean": v["adv_abs_sum"] / n,
                    "grpo/tokens/adv_row_spread_max": v["adv_row_spread_max"]})
    if v["logprob_tokens"] > 0:
        out["grpo/tokens/logprob_nonfinite"] = v["logprob_nonfinite"]
    if v["kl_tokens"] > 0:
        out.update(_kl_metrics(v))
    if v["user_kl_tokens"] > 0:
        out.update(_user_metrics(v))
    if v["ratio_tokens"] > 0:
        n = v["ratio_tokens"]
        out.update({"grpo/ratio/mean": 1.0 + v["ratio_m1_sum"] / n, "grpo/ratio/clip_frac": v["ratio_clipped"] / n,
                    "grpo/ratio/log_abs_max": v["on_policy_absdiff_max"]})
    return out
