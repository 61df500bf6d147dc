"""The boundary's first step: the input errors, and any value a trainer hands us as a checked tensor.

Every error names the argument, what was expected and what came.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

# the input errors live in grpo_monitor.errors; this old import path keeps working
from ...errors import InputError as InputError
from ...errors import InputTypeError as InputTypeError
from ...errors import InputValueError as InputValueError

_NUMERIC_KINDS = "biuf"




@contextlib.contextmanager
def boundary():
    """Re-raise ValueError/TypeError from validation code as input errors."""
    try:
        yield
    except InputError:
        raise
    except ValueError as exc:
        raise InputValueError(str(exc)) from exc
    except TypeError as exc:
        raise InputTypeError(str(exc)) from exc


def as_tensor(value: Any, name: str) -> torch.Tensor:
    """``value`` as a real-valued tensor (numpy arrays and number lists accepted).

    >>> as_tensor([1, 0, 1], "rewards").dtype
    torch.int64
    """
    if isinstance(value, torch.Tensor):
        tensor = value.detach()  # the monitor never needs gradients; keeps it off the autograd graph
    elif isinstance(value, np.ndarray):
        if value.dtype.kind not in _NUMERIC_KINDS:
            raise InputTypeError(f"{name} must hold numbers, but got a numpy array of dtype {value.dtype}")
        tensor = torch.from_numpy(np.ascontiguousarray(value))
    elif isinstance(value, (list, tuple)):
        try:
            tensor = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise InputTypeError(_list_error(value, name, exc)) from exc
    else:
        raise InputTypeError(f"{name} must be a torch tensor or numpy array, but got {type(value).__name__}")
    check_kind(tensor, name)
    return tensor


#: What :func:`as_tensor` takes, named in every refusal of another kind of tensor.
SUPPORTED = ("supported: dense (strided) real tensors with data (any float, integer or bool dtype, on any device "
             "but meta), numpy arrays and lists of numbers")


def check_values(tensor: torch.Tensor, name: str, *, nan: bool = False, negative: bool = True) -> torch.Tensor:
    """Refuse the values a check cannot consume: infinities, NaN (unless ``nan``), negatives (unless ``negative``),
    naming ``name``, the first bad index and its value; ``tensor`` is returned unchanged.

    >>> check_values(torch.tensor([[3., 2.], [float("nan"), 1.]]), "lengths", negative=False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    grpo_monitor.errors.InputValueError: lengths[1][0] is nan; lengths must be finite numbers >= 0 ...
    """
    if not tensor.is_floating_point() and (negative or tensor.dtype == torch.bool):
        return tensor
    if _clean(tensor, nan, negative):
        return tensor
    bad = ~torch.isfinite(tensor) if tensor.is_floating_point() else torch.zeros_like(tensor, dtype=torch.bool)
    if nan:
        bad &= ~torch.isnan(tensor)
    if not negative:
        bad |= tensor < 0
    if not bool(bad.any()):
        return tensor
    index = torch.nonzero(bad)[0].tolist()
    value = tensor[tuple(index)].item()
    want = "finite numbers" + (" or NaN" if nan else "") + ("" if negative else " >= 0")
    raise InputValueError(f"{name}{''.join(f'[{i}]' for i in index)} is {value!r}; {name} must be {want} "
                          f"({int(bad.sum())} of {bad.numel()} entries bad); fix them at their source")


def _clean(tensor: torch.Tensor, nan: bool, negative: bool) -> bool:
    """True only when no value of ``tensor`` is bad, by one reduction and one host read (as many as the full test's
    ``any``): a finite sum (``nansum`` where NaN is allowed) holds no infinity and no NaN, and a least value >= 0 and a
    finite largest no negative. False sends :func:`check_values` to the full test (a sum that overflowed, a bad value).

    >>> _clean(torch.tensor([1.0, float("nan")]), True, True), _clean(torch.tensor([1.0, float("inf")]), True, True)
    (True, False)
    """
    if tensor.numel() == 0:
        return True
    if not tensor.is_floating_point():  # integers, negatives refused
        return bool(tensor.amin() >= 0)
    if negative:
        return math.isfinite(float(tensor.nansum() if nan else tensor.sum()))
    if nan:
        return False
    lo, hi = torch.aminmax(tensor)  # NaN in, NaN out; an infinite largest makes the sum NaN
    return float(lo + hi * 0) >= 0


def check_kind(tensor: torch.Tensor, name: str) -> None:
    """Refuse the tensor kinds the statistics cannot read, naming ``name``, the kind and what is taken.

    >>> check_kind(torch.ones(2, 2).to_sparse(), "rewards")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    grpo_monitor.errors.InputTypeError: rewards is a sparse tensor (layout torch.sparse_coo); ... call .to_dense()
    """
    if tensor.is_nested:
        what, fix = "a nested tensor (ragged rows)", "pad it (torch.nested.to_padded_tensor) and pass a mask"
    elif tensor.layout != torch.strided:
        what, fix = f"a sparse tensor (layout {tensor.layout})", "call .to_dense()"
    elif tensor.is_quantized:
        what, fix = f"a quantized tensor (dtype {tensor.dtype})", "call .dequantize()"
    elif tensor.device.type == "meta":
        what, fix = f"on the meta device (shape {tuple(tensor.shape)}, no data)", "pass a materialised tensor"
    elif tensor.is_complex():
        what, fix = f"a complex tensor (dtype {tensor.dtype})", "pass real values (e.g. .real or .abs())"
    else:
        return
    raise InputTypeError(f"{name} is {what}; {SUPPORTED}; {fix}")


def _list_error(value: Sequence[Any], name: str, exc: Exception) -> str:
    """Why a list did not become a tensor: its first element that is not a number, or torch's reason.

    >>> _list_error([1.0, None], "rewards", RuntimeError())  # doctest: +ELLIPSIS
    "rewards must be a tensor, array or list of numbers, but rewards[1] is None (NoneType); use float('nan')..."
    """
    head = f"{name} must be a tensor, array or list of numbers"
    found = _first_non_number(value)
    if found is None:  # e.g. rows of different lengths
        return f"{head}, but got {value!r:.80}: {exc}"
    index, item = found
    text = f"{head}, but {name}{index} is {item!r:.40} ({type(item).__name__})"
    if name == "rewards":
        text += "; use float('nan') to mark an unscorable row"
    return text


def _first_non_number(value: Sequence[Any]) -> tuple[str, Any] | None:
    """The index (``[i]``, ``[i][j]``, ...) and value of the first element of nested lists that is not a number."""
    for i, item in enumerate(value):
        if isinstance(item, (list, tuple)):
            found = _first_non_number(item)
            if found is not None:
                return f"[{i}]{found[0]}", found[1]
        elif not isinstance(item, (numbers.Number, torch.Tensor, np.ndarray)):
            return f"[{i}]", item
    return None
