"""The API boundary: turn what a trainer hands us into checked tensors and a group index.

Every error names the argument, what was expected and what came.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import numbers
import operator
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import torch

from ..catalog.metrics import MONITOR_SECTIONS
from ..stats.segments import Segments

_NUMERIC_KINDS = "biuf"


class InputError(Exception):
    """Base of the errors raised for bad input at the API boundary."""


class InputValueError(InputError, ValueError):
    """A value of the wrong shape, length or layout."""


class InputTypeError(InputError, TypeError):
    """A value of the wrong type or dtype."""


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


def check_kind(tensor: torch.Tensor, name: str) -> None:
    """Refuse the tensor kinds the statistics cannot read, naming ``name``, the kind and what is taken.

    >>> check_kind(torch.ones(2, 2).to_sparse(), "rewards")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    grpo_monitor.step.inputs.InputTypeError: rewards is a sparse tensor (layout torch.sparse_coo); ... call .to_dense()
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


@dataclasses.dataclass
class GroupLayout:
    """Flat rewards with a dense group index.

    ``gid[i]`` is the group of row ``i`` in ``0..num_groups-1``; ``labels[g]`` is the id
    the user gave that group (row index for ``(B, G)`` input).
    """

    rewards: torch.Tensor  # (N,) float64
    gid: torch.Tensor  # (N,) int64
    num_groups: int
    labels: Sequence[Hashable]
    shape: tuple[int, ...]
    block: int | None = None  # G when the groups are contiguous blocks of G rows

    def segments(self) -> Segments:
        """The grouping for the reductions (dense ``(B, G)`` when the groups are blocks)."""
        return Segments(self.gid, self.num_groups, self.block)


def group_layout(rewards: Any, group_ids: Any = None, group_size: int | None = None) -> GroupLayout:
    """Resolve the three accepted layouts: ``(B, G)``, flat with ids, flat with ``group_size``.

    Empty rewards (``(0, G)``, ``(B, 0)`` or ``(0,)``) give an empty layout in every case.
    """
    r = as_tensor(rewards, "rewards")
    if r.dim() not in (1, 2):
        raise InputValueError(
            f"rewards must be (B, G) with one group per row or flat (N,), but got {r.dim()}-D shape {tuple(r.shape)}"
        )
    flat = r.reshape(-1).to(torch.float64)
    if r.dim() == 2:
        if group_ids is not None:
            raise InputValueError("group_ids must be None when rewards are (B, G): each row is one group")
        b, g = r.shape
        gid = torch.arange(b, device=r.device).repeat_interleave(g)
        return GroupLayout(flat, gid, b, range(b), tuple(r.shape), block=g)
    if group_ids is not None:
        gid, labels = factorize(group_ids, len(flat), flat.device)
        return GroupLayout(flat, gid, len(labels), labels, tuple(r.shape))
    if group_size is None and len(flat) == 0:
        return GroupLayout(flat, torch.zeros(0, dtype=torch.int64, device=r.device), 0, range(0), tuple(r.shape))
    if group_size is None:
        raise InputValueError(
            f"flat rewards of shape {tuple(r.shape)} need group_ids, or config.group_size for contiguous groups"
        )
    if len(flat) % group_size:
        raise InputValueError(
            f"rewards has {len(flat)} rows, not a multiple of config.group_size={group_size}; "
            "pass group_ids or fix group_size"
        )
    n_groups = len(flat) // group_size
    gid = torch.arange(n_groups, device=r.device).repeat_interleave(group_size)
    return GroupLayout(flat, gid, n_groups, range(n_groups), tuple(r.shape), block=group_size)


def factorize(ids: Any, length: int, device: torch.device) -> tuple[torch.Tensor, list[Hashable]]:
    """Dense group index and the unique ids in order of first appearance."""
    if isinstance(ids, torch.Tensor) or (isinstance(ids, np.ndarray) and ids.dtype.kind in "biu"):
        t = torch.as_tensor(ids)
        check_kind(t, "group_ids")
        if t.is_floating_point() or t.is_complex():
            raise InputTypeError(f"group_ids must be integers or hashable ids, but got a tensor of dtype {t.dtype}")
        if t.dim() != 1:
            raise InputValueError(f"group_ids has shape {tuple(t.shape)} but rewards has shape ({length},); "
                                  "pass one id per row")
        _check_length(len(t), length)
        uniq, inverse = torch.unique(t.to(device), return_inverse=True)
        return inverse, uniq.tolist()
    seq = _id_list(ids, "group_ids")
    _check_length(len(seq), length)
    index: dict[Hashable, int] = {}
    try:  # one dict lookup per row, straight into an int64 array (no list of a million ints)
        dense = np.fromiter((index.setdefault(x, len(index)) for x in seq), dtype=np.int64, count=len(seq))
    except TypeError as exc:
        raise InputTypeError(f"group_ids must be hashable (ints or strings such as verl's uid), got {exc}") from exc
    return torch.from_numpy(dense).to(device), list(index)


def _id_list(ids: Any, name: str) -> list[Hashable]:
    """``ids`` (a sequence, array or tensor of hashable ids) as a list."""
    if isinstance(ids, (str, bytes, dict, set, frozenset)) or not hasattr(ids, "__iter__"):
        raise InputTypeError(f"{name} must be a list, array or tensor of ids, but got {type(ids).__name__}")
    if isinstance(ids, torch.Tensor):
        check_kind(ids, name)
    seq = ids.tolist() if isinstance(ids, (np.ndarray, torch.Tensor)) else list(ids)
    if not isinstance(seq, list):  # a 0-d array or tensor
        raise InputValueError(f"{name} must be one-dimensional, but got a scalar {seq!r}")
    for i, x in enumerate(seq):
        if _is_nan(x):
            raise InputValueError(f"{name}[{i}] is NaN: a NaN never equals itself, so it cannot name a group or a "
                                  f"question; pass integer or string ids")
    return seq


def _is_nan(x: Any) -> bool:
    """Whether an id is NaN (a float, a numpy float, or a tuple holding one)."""
    if isinstance(x, (float, np.floating)):
        return math.isnan(x)
    return isinstance(x, tuple) and any(_is_nan(v) for v in x)


def _check_length(got: int, want: int) -> None:
    if got != want:
        raise InputValueError(f"group_ids has {got} entries but rewards has {want} rows; pass one id per row")


def align_rows(value: Any, name: str, layout: GroupLayout) -> torch.Tensor:
    """A per-row tensor (e.g. advantages) flattened and checked against the rewards."""
    t = as_tensor(value, name)
    if t.device != layout.rewards.device:
        raise InputValueError(f"{name} is on {t.device} but rewards is on {layout.rewards.device}; "
                              "pass both on one device")
    if tuple(t.shape) != layout.shape and not (t.dim() == 1 and t.numel() == len(layout.rewards)):
        raise InputValueError(
            f"{name} has shape {tuple(t.shape)} but rewards has shape {layout.shape}; pass {name} aligned with rewards"
        )
    return t.reshape(-1).to(torch.float64)


def align_components(value: Any, weights: Any, layout: GroupLayout) -> tuple[torch.Tensor, tuple[float, ...] | None]:
    """Reward components ``(B, G, K)`` (or ``(N, K)``) flattened to ``(N, K)``, and their weights as a tuple."""
    t = align_rows_k(value, layout)
    if weights is None:
        return t, None
    w = as_tensor(weights, "reward_weights").reshape(-1).to(torch.float64)
    if len(w) != t.shape[1] or not bool(torch.isfinite(w).all()):
        raise InputValueError(f"reward_weights has {len(w)} entries but reward_components has {t.shape[1]} "
                              "components; pass one finite weight per component")
    return t, tuple(float(x) for x in w.tolist())


def align_rows_k(value: Any, layout: GroupLayout) -> torch.Tensor:
    t = as_tensor(value, "reward_components")
    if t.device != layout.rewards.device:
        raise InputValueError(f"reward_components is on {t.device} but rewards is on {layout.rewards.device}; "
                              "pass both on one device")
    n = len(layout.rewards)
    if t.dim() < 2 or (tuple(t.shape[:-1]) != layout.shape and tuple(t.shape[:-1]) != (n,)):
        raise InputValueError(f"reward_components has shape {tuple(t.shape)} but rewards has shape {layout.shape}; "
                              f"pass reward_components of shape {layout.shape} + (K,), one column per reward")
    return t.reshape(n, t.shape[-1]).to(torch.float64)


def truncation_rows(truncated: Any, lengths: torch.Tensor | None, max_length: int | None,
                    layout: GroupLayout) -> torch.Tensor | None:
    """``truncated`` (bool or 0/1 per row) as flat float64 0/1 aligned with the rewards; else rows whose
    ``lengths`` reach ``max_length``; ``None`` when neither is known."""
    if truncated is None:
        return None if lengths is None or max_length is None else (lengths >= max_length).to(torch.float64)
    t = as_tensor(truncated, "truncated")
    if t.dtype != torch.bool and not bool(((t == 0) | (t == 1)).all()):
        raise InputValueError(f"truncated must be bool (or 0/1) per row, but holds other values: "
                              f"{sorted(set(t.reshape(-1).tolist()) - {0, 1})[:5]}")
    return align_rows(t.to(torch.float64), "truncated", layout)


def per_group_labels(question_ids: Any, layout: GroupLayout) -> list[Hashable]:
    """Question ids given per group (len B) or per row (len N) as one id per group."""
    ids = [plain_id(q) for q in _id_list(question_ids, "question_ids")]
    try:
        set(ids)
    except TypeError as exc:
        raise InputTypeError(f"question_ids must be hashable (ints, strings or tuples), got {exc}") from exc
    if len(ids) == layout.num_groups:
        return ids
    if len(ids) == len(layout.rewards) and layout.block:  # contiguous blocks: the first row of each
        return ids[:: layout.block]
    if len(ids) == len(layout.rewards):
        first = torch.full((layout.num_groups,), len(ids), dtype=torch.int64)
        rows = torch.arange(len(ids), dtype=torch.int64)
        first.scatter_reduce_(0, layout.gid.cpu(), rows, reduce="amin")
        return [ids[i] for i in first.tolist()]
    raise InputValueError(
        f"question_ids has {len(ids)} entries; expected one per group ({layout.num_groups}) "
        f"or per row ({len(layout.rewards)})"
    )


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
        out[key] = _finite(key, value)
    return out


def _finite(key: str, value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - whatever float() refuses (a list, a multi-element tensor)
        raise InputTypeError(f"metrics[{key!r}] must be a finite number, but got {type(value).__name__} "
                             f"{value!r:.40}") from None
    if isinstance(value, (str, bytes)) or not math.isfinite(number):
        kind = InputTypeError if isinstance(value, (str, bytes)) else InputValueError
        raise kind(f"metrics[{key!r}] must be a finite number, but got {value!r:.40}")
    return number
