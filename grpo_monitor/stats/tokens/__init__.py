"""Loss-side token statistics (KL estimators, importance ratios, token invariants) as one vector.

``token_sufficient_stats`` reads the ``(B, T)`` token tensors of one micro-batch once and
returns a float64 vector laid out by ``TOKEN_FIELDS``: sums, counts, minima and maxima
(never means), so micro-batches and ranks merge with ``combine_token_stats`` /
``TOKEN_LAYOUT.reduce`` and ``token_metrics`` turns the merged vector into ``grpo/...``
keys. Only tokens with ``mask > 0`` count; padding may hold NaN, inf or garbage and is
excluded with ``torch.where`` (never multiplied by the mask). With ``u = ref_logprobs -
logprobs``: ``k1 = -u``, ``k2 = u^2 / 2``, ``k3 = exp(u) - u - 1`` (Schulman's estimators).
With ``sampler_logprobs``, the same estimators of the training-inference mismatch with
``u = Delta = old_logprobs - sampler_logprobs`` (``logprobs`` without ``old_logprobs``): the
``grpo/mismatch/*`` keys, in the same pass.
Each statistic is reduced per row in the input precision (float32 for float32 inputs),
then across rows in float64. No host sync, no data-dependent shapes.

Where things live:

- ``table``: the token inputs ``TOKEN_INPUTS`` (name, dtype kind, shapes, C name) and the
  field table ``FIELDS`` (name, reduction, and the key a slot reports alone); ``TokenInputs``,
  the checks, the op's schema, the C kernel's input pointers, ``TOKEN_FIELDS``,
  ``TOKEN_LAYOUT`` and the C kernel's slot enum derive from them.
- ``arguments``: ``TokenInputs``, the record every backend takes, and its checks.
- ``torch_rows``: the row function in torch ops (eager and compiled backends).
- ``native_kernel.c``: the row function in C; ``native_build`` builds, caches and loads it.
- ``triton_rows`` / ``triton_kernel``: the row passes and the kernel in Triton (CUDA; on CPU
  under ``TRITON_INTERPRET=1``), imported only where ``triton`` imports.
- ``backends``: the ``Backend`` protocol (``name``, ``accepts(inputs)``, ``run(inputs)``),
  the native, compiled and eager backends, and ``select_backend``, the one choice.
- ``readout``: ``token_metrics``.

Adding a statistic touches:

1. ``table.FIELDS``: one ``TokenField`` (name, reduction; a ``key`` with ``per`` or
   ``when`` if it reports a value, a mean or a fraction on its own);
2. ``torch_rows.row_partials``: its per-row partial under that name (eager and compiled);
3. ``native_kernel.c``, the C row function: its accumulator in ``Acc`` (and ``init_acc``
   for an extremum), its line in the pass over the inputs it needs, and its slot
   ``o[S_<name>]`` in ``finish_row`` (the enum, the slot order and the merge come from the
   generated header).
4. ``triton_rows.py``: its accumulator in the pass over its inputs (returned per row), and
   ``triton_kernel.py``: its slot constant ``S_<name> = _slot("<name>")`` and its ``_add`` /
   ``_put_max`` / ``_put_min`` line in the row's finishing.

Nothing else: the vector layout, merging, the C slot order check and the table-driven
keys follow. A metric built from several slots (a std, say) is one line in
``readout.token_metrics``; a new ``grpo/...`` key also needs its entry in
``grpo_monitor/catalog/metrics.py`` (what the key means). ``tests/stats/test_tokens_native.py``
checks that the three backends agree on every slot, so a backend left behind fails there
(``tests/stats/test_tokens_triton.py`` for the Triton kernel, under the interpreter).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .arguments import DEFAULT_BAND, TokenInputs, token_inputs, validate_token_inputs
from .backends import AUTO_COMPILE_MIN_TOKENS, BACKENDS, Backend, select_backend
from .readout import token_metrics
from .table import (
    FIELDS,
    TOKEN_FIELDS,
    TOKEN_INDEX,
    TOKEN_INPUTS,
    TOKEN_LAYOUT,
    TOKEN_REDUCTIONS,
    TokenField,
    TokenInput,
)

__all__ = [
    "AUTO_COMPILE_MIN_TOKENS", "BACKENDS", "Backend", "FIELDS", "TOKEN_FIELDS", "TOKEN_INDEX", "TOKEN_INPUTS",
    "TOKEN_LAYOUT", "TOKEN_REDUCTIONS", "TokenField", "TokenInput", "TokenInputs", "combine_token_stats",
    "select_backend", "token_inputs", "token_metrics", "token_sufficient_stats", "validate_token_inputs",
]

_EMPTY_VECTORS: dict[torch.device, torch.Tensor] = {}


def token_sufficient_stats(
    mask: torch.Tensor, *, clip_range: Sequence[float] = (0.2, 0.2), kl_clamp: Sequence[float] | None = (-10.0, 10.0),
    mismatch_band: Sequence[float] = DEFAULT_BAND, entropy_low: float = 0.01, compile: bool | str = "auto",
    **tensors: torch.Tensor | None,
) -> torch.Tensor:
    """Sufficient statistics of one micro-batch, a float64 vector laid out by ``TOKEN_FIELDS``.

    ``tensors`` are the token tensors by name (``advantages``, ``logprobs``, ``ref_logprobs``,
    ``old_logprobs``, ``kl``, ``sampler_logprobs``, ``entropy``: the table ``TOKEN_INPUTS``).

    Empty sums are 0, empty minima +inf, empty maxima -inf. ``compile``: ``"auto"`` (compile
    large inputs unless ``GRPO_MONITOR_COMPILE=0``), ``True`` or ``False``; a failed compile
    warns once and the process continues eagerly. Compiled on an AVX2 CPU, contiguous float32
    inputs take the C kernel (same statistics, one pass; off with ``GRPO_MONITOR_NATIVE=0``);
    anything else takes ``torch.compile`` (see ``backends.select_backend``). Call
    ``validate_token_inputs`` first for worded errors (it is checked again here: metadata only,
    no sync). Works inside a caller's ``torch.compile`` (``fullgraph`` or not).

    >>> v = token_sufficient_stats(torch.tensor([[1, 1, 0]]), logprobs=torch.tensor([[-1., -2., float("nan")]]),
    ...                            ref_logprobs=torch.tensor([[-1., -1., 0.]]))
    >>> v[TOKEN_INDEX["valid_tokens"]].item(), v[TOKEN_INDEX["kl_u_sum"]].item()
    (2.0, 1.0)
    """
    x = token_inputs(mask, clip_range=clip_range, kl_clamp=kl_clamp, mismatch_band=mismatch_band,
                     entropy_low=entropy_low, **tensors)
    if compile not in (True, False, "auto"):
        raise ValueError(f"compile must be True, False or 'auto', but got {compile!r}")
    if mask.numel() == 0:
        return _empty_vector(mask.device)
    with torch.no_grad():
        return select_backend(x, compile).run(x)


def _empty_vector(device: torch.device) -> torch.Tensor:
    """The statistics of no tokens; cached per device (building it from a list is a host-to-device copy)."""
    if device not in _EMPTY_VECTORS:
        _EMPTY_VECTORS[device] = TOKEN_LAYOUT.empty(device)
    return _EMPTY_VECTORS[device].clone()


def combine_token_stats(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Merge two token statistics vectors slot by slot (sum, min or max): micro-batches, ranks.

    >>> m = torch.ones(1, 2)
    >>> combine_token_stats(token_sufficient_stats(m), token_sufficient_stats(m))[0].item()
    4.0
    """
    return TOKEN_LAYOUT.combine(a, b)
