"""The other calls' arguments: ``end_step``'s step, ``observe_loss``'s loss and rows, ``add_metrics``' dict."""

from __future__ import annotations

import math
import operator
from typing import Any

import torch

from ...catalog.metrics import MONITOR_SECTIONS
from .tensors import InputTypeError, InputValueError, as_tensor


def step_arg(step: Any, current: int) -> int:
    """``end_step``'s optional step number (``current``: the next step), checked at the boundary."""
    if step is None:
        return current
    try:
        value = operator.index(step) if not isinstance(step, bool) else None
    except TypeError:
        value = None
    if value is None:
        raise InputTypeError(f"step must be an int or None, but got {type(step).__name__} {step!r:.40}")
    if value < max(current - 1, 0):
        raise InputValueError(
            f"step must be >= the last step {current - 1} (steps never go back), but got {value}"
        )
    return value


def loss_arg(loss: Any) -> torch.Tensor | None:
    """``observe_loss``'s ``loss``: None, or a one-element tensor (kept on its autograd graph)."""
    if loss is None:
        return None
    if not isinstance(loss, torch.Tensor):
        raise InputTypeError(f"loss must be the loss tensor (a one-element torch.Tensor the trainer calls backward() "
                             f"on), but got {type(loss).__name__}")
    if loss.numel() != 1:
        raise InputValueError(f"loss must be a scalar (one element), but got shape {tuple(loss.shape)}; pass the "
                              "reduced loss, not the per-token loss")
    if loss.is_complex() or not loss.is_floating_point():
        raise InputTypeError(f"loss must be a real floating-point tensor, but got dtype {loss.dtype}")
    return loss


def rows_arg(rows: Any, mask: Any) -> torch.Tensor | None:
    """``observe_loss``'s ``rows``: one integer index per row of ``mask`` into the latest rollout's rows."""
    if rows is None:
        return None
    t = as_tensor(rows, "rows")
    if t.is_floating_point() or t.dtype == torch.bool:
        raise InputTypeError(f"rows must hold integer row indices, but got dtype {t.dtype}")
    n = getattr(mask, "shape", (None,))[0]
    if t.dim() != 1 or (n is not None and len(t) != n):
        raise InputValueError(f"rows has shape {tuple(t.shape)} but mask has {n} rows; pass one rollout row "
                              "index per row of the micro-batch")
    return t.to(torch.int64)


def user_metrics(metrics: object) -> dict[str, float]:
    """``add_metrics``' argument checked: non-empty string keys outside the monitor's own
    sections (``grpo/<section>/...`` for the sections in ``MONITOR_SECTIONS``), finite numbers.

    >>> user_metrics({"grpo/trl/gap": 0.5, "custom/lr": 1})
    {'grpo/trl/gap': 0.5, 'custom/lr': 1.0}
    """
    if not isinstance(metrics, dict):
        raise InputTypeError(f"metrics must be a dict of str -> float, but got {type(metrics).__name__}")
    out = {}
    for key, value in metrics.items():
        if not isinstance(key, str) or not key.strip():
            raise InputValueError(f"metrics keys must be non-empty strings, but got {key!r}")
        parts = key.split("/")
        if parts[0] == "grpo" and len(parts) > 1 and parts[1] in MONITOR_SECTIONS:
            raise InputValueError(
                f"metrics key {key!r} is in the monitor's own section 'grpo/{parts[1]}/'; "
                "use your own prefix (e.g. 'grpo/user/...' or 'custom/...')")
        out[key] = finite_number(key, value)
    return out


def finite_number(key: str, value: object) -> float:
    """``metrics[key]``'s value as a float: a finite number, else a worded input error naming the key."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - whatever float() refuses (a list, a multi-element tensor)
        raise InputTypeError(f"metrics[{key!r}] must be a finite number, but got {type(value).__name__} "
                             f"{value!r:.40}") from None
    if isinstance(value, (str, bytes)) or not math.isfinite(number):
        kind = InputTypeError if isinstance(value, (str, bytes)) else InputValueError
        raise kind(f"metrics[{key!r}] must be a finite number, but got {value!r:.40}")
    return number
