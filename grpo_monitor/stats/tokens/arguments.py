"""The token tensors of one micro-batch as one record, and their checks (metadata only, no sync)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch

TENSOR_NAMES = ("advantages", "logprobs", "ref_logprobs", "old_logprobs", "kl", "sampler_logprobs", "entropy")
#: ``mismatch_band``'s default: the importance-weight band of truncated / masked importance sampling.
DEFAULT_BAND = (0.5, 2.0)


class TokenInputs(NamedTuple):
    """What every backend takes: the ``(B, T)`` tensors (``advantages`` may be ``(B,)``), absent ones
    ``None``, and the options as the constants the kernels compare with.

    ``sampler_logprobs`` are the inference engine's log-probs of the sampled tokens, ``entropy``
    the trainer's per-token entropies; ``band_log`` is ``(log low, log high)`` of the mismatch
    importance-weight band and ``entropy_low`` the low-entropy threshold (nats).
    """

    mask: torch.Tensor
    advantages: torch.Tensor | None
    logprobs: torch.Tensor | None
    ref_logprobs: torch.Tensor | None
    old_logprobs: torch.Tensor | None
    kl: torch.Tensor | None
    clip_log: tuple[float, float]  # (log(1 - low), log1p(high)): bounds of the log ratio
    clamp: tuple[float, float] | None  # the trainer's KL clamp, or None
    sampler_logprobs: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    band_log: tuple[float, float] = (math.log(DEFAULT_BAND[0]), math.log(DEFAULT_BAND[1]))
    entropy_low: float = 0.01

    @property
    def values(self) -> tuple[torch.Tensor | None, ...]:
        """The seven value tensors (not the mask), in ``TENSOR_NAMES`` order."""
        return (self.advantages, self.logprobs, self.ref_logprobs, self.old_logprobs, self.kl,
                self.sampler_logprobs, self.entropy)

    @property
    def trainer_logprobs(self) -> torch.Tensor | None:
        """The trainer's side of the mismatch: ``old_logprobs``, else ``logprobs`` (first inner epoch)."""
        return self.old_logprobs if self.old_logprobs is not None else self.logprobs

    def row_block(self, start: int, stop: int) -> TokenInputs:
        """Rows ``start:stop`` of every tensor (views, no copy)."""
        def cut(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[start:stop]

        return self._replace(mask=self.mask[start:stop], advantages=cut(self.advantages), logprobs=cut(self.logprobs),
                             ref_logprobs=cut(self.ref_logprobs), old_logprobs=cut(self.old_logprobs), kl=cut(self.kl),
                             sampler_logprobs=cut(self.sampler_logprobs), entropy=cut(self.entropy))


def token_inputs(mask: torch.Tensor, *, advantages: torch.Tensor | None = None, logprobs: torch.Tensor | None = None,
                 ref_logprobs: torch.Tensor | None = None, old_logprobs: torch.Tensor | None = None,
                 kl: torch.Tensor | None = None, sampler_logprobs: torch.Tensor | None = None,
                 entropy: torch.Tensor | None = None, clip_range: Sequence[float] = (0.2, 0.2),
                 kl_clamp: Sequence[float] | None = (-10.0, 10.0), mismatch_band: Sequence[float] = DEFAULT_BAND,
                 entropy_low: float = 0.01) -> TokenInputs:
    """Checked ``TokenInputs`` (worded errors naming the argument).

    >>> token_inputs(torch.ones(2, 3), clip_range=(0.2, 0.28)).clamp
    (-10.0, 10.0)
    """
    validate_token_inputs(mask, advantages=advantages, logprobs=logprobs, ref_logprobs=ref_logprobs,
                          old_logprobs=old_logprobs, kl=kl, sampler_logprobs=sampler_logprobs, entropy=entropy)
    _check_options(clip_range, kl_clamp)
    if len(mismatch_band) != 2 or not 0 < mismatch_band[0] < 1 < mismatch_band[1]:
        raise ValueError(f"mismatch_band must be (low, high) with 0 < low < 1 < high, but got {tuple(mismatch_band)}")
    low, high = float(clip_range[0]), float(clip_range[1])
    clip_log = (math.log(1.0 - low) if low < 1.0 else -math.inf, math.log1p(high))
    clamp = None if kl_clamp is None else (float(kl_clamp[0]), float(kl_clamp[1]))
    band_log = (math.log(float(mismatch_band[0])), math.log(float(mismatch_band[1])))
    return TokenInputs(mask, advantages, logprobs, ref_logprobs, old_logprobs, kl, clip_log, clamp,
                       sampler_logprobs, entropy, band_log, float(entropy_low))


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
        if t is not None:
            _check_tensor(name, t, mask)


def _check_tensor(name: str, t: torch.Tensor, mask: torch.Tensor) -> None:
    if name not in TENSOR_NAMES:
        raise TypeError(f"unexpected token tensor {name!r}; expected some of {list(TENSOR_NAMES)}")
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
