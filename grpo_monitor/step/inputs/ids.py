"""Ids a trainer names groups and questions with: checked as a list, kept as plain Python values.

Plain values (numpy and torch scalars unwrapped) hash like the user's ids and go into a
checkpoint without pickled numpy objects.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

import numpy as np
import torch

from .tensors import InputTypeError, InputValueError, check_kind


def id_list(ids: Any, name: str) -> list[Hashable]:
    """``ids`` (a sequence, array or tensor of hashable ids) as a list."""
    if isinstance(ids, (str, bytes, dict, set, frozenset)) or not hasattr(ids, "__iter__"):
        raise InputTypeError(f"{name} must be a list, array or tensor of ids, but got {type(ids).__name__}")
    if isinstance(ids, torch.Tensor):
        check_kind(ids, name)
    seq = ids.tolist() if isinstance(ids, (np.ndarray, torch.Tensor)) else list(ids)
    if not isinstance(seq, list):  # a 0-d array or tensor
        raise InputValueError(f"{name} must be one-dimensional, but got a scalar {seq!r}")
    if _PLAIN.issuperset(map(type, seq)):  # plain ints and strings (the usual ids): no NaN, no per-id loop
        return seq
    for i, x in enumerate(seq):
        if _is_nan(x):
            raise InputValueError(f"{name}[{i}] is NaN: a NaN never equals itself, so it cannot name a group or a "
                                  f"question; pass integer or string ids")
    return seq


_PLAIN = frozenset((int, str))  # exact types: a plain_id is the id itself, and never NaN


def plain_ids(ids: list[Any]) -> list[Any]:
    """:func:`plain_id` of each id (the list itself when every id is a plain int or string)."""
    return ids if _PLAIN.issuperset(map(type, ids)) else [plain_id(q) for q in ids]


def _is_nan(x: Any) -> bool:
    """Whether an id is NaN (a float, a numpy float, or a tuple holding one)."""
    if isinstance(x, (float, np.floating)):
        return math.isnan(x)
    return isinstance(x, tuple) and any(_is_nan(v) for v in x)


def plain_id(value: Any) -> Any:
    """An id as a plain Python value: numpy and 0-d torch scalars unwrapped, tuples element-wise.

    Equal ids stay equal (``np.int64(3)`` and ``3`` hash alike), and a checkpoint of them
    needs no pickled numpy objects.

    >>> plain_id(np.int64(3)), plain_id(np.str_("q")), plain_id((np.int32(1), "a"))
    (3, 'q', (1, 'a'))
    """
    if isinstance(value, (np.generic, torch.Tensor)) and getattr(value, "ndim", 0) == 0:
        return value.item()
    for kind in (bool, str, int, float):  # subclasses (enums, ...) as the plain type
        if isinstance(value, kind):
            return value if type(value) is kind else kind(value)
    if isinstance(value, tuple):
        return tuple(plain_id(v) for v in value)
    return value


def plain_state(value: Any) -> Any:
    """A state dict with every leaf a plain Python value (JSON and ``weights_only`` friendly).

    Ids that are neither numbers, strings, tuples nor None become their ``str()``.
    """
    if isinstance(value, dict):
        return {plain_state(k): plain_state(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_state(v) for v in value]
    value = plain_id(value)
    if isinstance(value, tuple):
        return tuple(plain_state(v) for v in value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
