"""Rewards and the rows aligned with them: the three accepted group layouts and per-row arguments.

:func:`group_layout` resolves ``(B, G)``, flat with ``group_ids`` and flat with ``group_size``
into a :class:`GroupLayout`; the ``align_*`` functions check a per-row argument against it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import torch

from ...stats.segments import Segments
from .ids import id_list, plain_ids
from .tensors import InputTypeError, InputValueError, as_tensor, check_kind, check_values


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
    seq = id_list(ids, "group_ids")
    _check_length(len(seq), length)
    index: dict[Hashable, int] = {}
    try:  # one dict lookup per row, straight into an int64 array (no list of a million ints)
        dense = np.fromiter((index.setdefault(x, len(index)) for x in seq), dtype=np.int64, count=len(seq))
    except TypeError as exc:
        raise InputTypeError(f"group_ids must be hashable (ints or strings such as verl's uid), got {exc}") from exc
    return torch.from_numpy(dense).to(device), list(index)


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


def token_counts(value: Any, name: str, layout: GroupLayout) -> torch.Tensor:
    """Per-row token counts (``lengths``): aligned with the rewards, finite and >= 0, else the user's error
    naming the first bad entry (a check that consumed a NaN length would fault inside the monitor)."""
    return align_rows(check_values(as_tensor(value, name), name, negative=False), name, layout)


def align_components(value: Any, weights: Any, layout: GroupLayout) -> tuple[torch.Tensor, tuple[float, ...] | None]:
    """Reward components ``(B, G, K)`` (or ``(N, K)``) flattened to ``(N, K)``, and their weights as a tuple."""
    t = align_rows_k(value, layout)
    if weights is None:
        return t, None
    w = check_values(as_tensor(weights, "reward_weights"), "reward_weights").reshape(-1).to(torch.float64)
    if len(w) != t.shape[1]:
        raise InputValueError(f"reward_weights has {len(w)} entries but reward_components has {t.shape[1]} "
                              "components; pass one finite weight per component")
    return t, tuple(float(x) for x in w.tolist())


def align_rows_k(value: Any, layout: GroupLayout) -> torch.Tensor:
    t = check_values(as_tensor(value, "reward_components"), "reward_components", nan=True)  # NaN: unscored cell
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
    bad = (t != 0) & (t != 1) if t.dtype != torch.bool else None
    if bad is not None and bool(bad.any()):
        index = torch.nonzero(bad)[0].tolist()
        raise InputValueError(f"truncated{''.join(f'[{i}]' for i in index)} is {t[tuple(index)].item()!r}; truncated "
                              f"must be bool (or 0/1) per row, but holds other values: "
                              f"{sorted(set(t[bad].tolist()), key=str)[:5]}")
    return align_rows(t.to(torch.float64), "truncated", layout)


def per_group_labels(question_ids: Any, layout: GroupLayout) -> list[Hashable]:
    """Question ids given per group (len B) or per row (len N) as one id per group."""
    ids = plain_ids(id_list(question_ids, "question_ids"))
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
