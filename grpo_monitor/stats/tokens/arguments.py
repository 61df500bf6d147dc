"""The token tensors of one micro-batch as one record, and their checks (metadata only, no sync).

Both follow the table of token inputs (:data:`.table.TOKEN_INPUTS`): names, order, dtypes and shapes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch

from .table import TOKEN_INPUTS, VALUE_INPUTS

#: The value tensors' names (every token input but the mask), in ``TokenInputs.values`` order.
TENSOR_NAMES: tuple[str, ...] = tuple(i.name for i in VALUE_INPUTS)
TENSOR_INDEX: dict[str, int] = {name: i for i, name in enumerate(TENSOR_NAMES)}
_INPUTS = {i.name: i for i in TOKEN_INPUTS}
#: ``mismatch_band``'s default: the importance-weight band of truncated / masked importance sampling.
DEFAULT_BAND = (0.5, 2.0)


class TokenInputs(NamedTuple):
    """What every backend takes: the ``(B, T)`` tensors of ``TENSOR_NAMES`` (``advantages`` may be ``(B,)``),
    absent ones ``None``, and the options as the constants the kernels compare with.

    ``values`` holds them in table order; ``x.get("logprobs")`` (or ``x.logprobs``) reads one.
    ``band_log`` is ``(log low, log high)`` of the mismatch importance-weight band and
    ``entropy_low`` the low-entropy threshold (nats).
    """

    mask: torch.Tensor
    values: tuple[torch.Tensor | None, ...]  # one per TENSOR_NAMES entry
    clip_log: tuple[float, float]  # (log(1 - low), log1p(high)): bounds of the log ratio
    clamp: tuple[float, float] | None  # the trainer's KL clamp, or None
    band_log: tuple[float, float] = (math.log(DEFAULT_BAND[0]), math.log(DEFAULT_BAND[1]))
    entropy_low: float = 0.01

    def get(self, name: str) -> torch.Tensor | None:
        """The tensor ``name`` of ``TENSOR_NAMES``, or None when it was not given."""
        return self.values[TENSOR_INDEX[name]]

    def __getattr__(self, name: str) -> torch.Tensor | None:
        """``x.logprobs`` and the like: a value tensor by its name (the table's)."""
        if name in TENSOR_INDEX:
            return self.values[TENSOR_INDEX[name]]
        raise AttributeError(f"TokenInputs has no attribute {name!r}; its tensors are {list(TENSOR_NAMES)}")

    @property
    def trainer_logprobs(self) -> torch.Tensor | None:
        """The trainer's side of the mismatch: ``old_logprobs``, else ``logprobs`` (first inner epoch)."""
        old = self.get("old_logprobs")
        return old if old is not None else self.get("logprobs")

    def row_block(self, start: int, stop: int) -> TokenInputs:
        """Rows ``start:stop`` of every tensor (views, no copy)."""
        return self._replace(mask=self.mask[start:stop],
                             values=tuple(None if t is None else t[start:stop] for t in self.values))


def token_inputs(mask: torch.Tensor, *, clip_range: Sequence[float] = (0.2, 0.2),
                 kl_clamp: Sequence[float] | None = (-10.0, 10.0), mismatch_band: Sequence[float] = DEFAULT_BAND,
                 entropy_low: float = 0.01, **tensors: torch.Tensor | None) -> TokenInputs:
    """Checked ``TokenInputs`` (worded errors naming the argument); ``tensors`` by their ``TENSOR_NAMES`` name.

    >>> token_inputs(torch.ones(2, 3), clip_range=(0.2, 0.28)).clamp
    (-10.0, 10.0)
    """
    validate_token_inputs(mask, **tensors)
    _check_options(clip_range, kl_clamp)
    if len(mismatch_band) != 2 or not 0 < mismatch_band[0] < 1 < mismatch_band[1]:
        raise ValueError(f"mismatch_band must be (low, high) with 0 < low < 1 < high, but got {tuple(mismatch_band)}")
    low, high = float(clip_range[0]), float(clip_range[1])
    clip_log = (math.log(1.0 - low) if low < 1.0 else -math.inf, math.log1p(high))
    clamp = None if kl_clamp is None else (float(kl_clamp[0]), float(kl_clamp[1]))
    band_log = (math.log(float(mismatch_band[0])), math.log(float(mismatch_band[1])))
    return TokenInputs(mask, tuple(tensors.get(name) for name in TENSOR_NAMES), clip_log, clamp, band_log,
                       float(entropy_low))


def validate_token_inputs(mask: torch.Tensor, **tensors: torch.Tensor | None) -> None:
    """Check shapes, devices and dtypes of the token tensors against ``mask``; no host sync.

    ``advantages`` may be ``(B, T)`` or ``(B,)``; every other tensor must match ``mask``.

    >>> validate_token_inputs(torch.ones(2, 3), logprobs=torch.zeros(2, 3), advantages=torch.zeros(2))
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor of shape (B, T), but got {type(mask).__name__}")
    if mask.dim() != 2:
        raise ValueError(f"mask must be 2-D (B, T), but has shape {tuple(mask.shape)}; pass one row per response")
    _check_dtype("mask", mask, allow_bool=_INPUTS["mask"].kind == "mask")
    for name, t in tensors.items():
        if t is not None:
            _check_tensor(name, t, mask)


def _check_tensor(name: str, t: torch.Tensor, mask: torch.Tensor) -> None:
    if name not in TENSOR_NAMES:
        raise TypeError(f"unexpected token tensor {name!r}; expected some of {list(TENSOR_NAMES)}")
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor aligned with mask, but got {type(t).__name__}")
    spec = _INPUTS[name]
    _check_dtype(name, t, allow_bool=spec.kind == "mask")
    per_row = spec.per_row and tuple(t.shape) == tuple(mask.shape[:1])
    if tuple(t.shape) != tuple(mask.shape) and not per_row:
        also = f" or ({mask.shape[0]},)" if spec.per_row else ""
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
