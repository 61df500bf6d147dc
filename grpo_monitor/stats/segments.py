"""Segment reductions: per-group sums, minima and maxima without a Python loop.

:class:`Segments` describes how rows form groups. When the groups are contiguous blocks
of one size ``G`` (rewards ``(B, G)``, or flat with ``group_size``) it is *dense*: per-row
values are viewed as ``(B, G)`` and reduced along the last axis, which is several times
faster than an index-driven scatter. Otherwise a dense group index ``gid`` drives
``index_add_`` / ``scatter_reduce_``. Per-row tensors handed to the methods must have
shape :attr:`Segments.row_shape` (``rows(flat)`` gives it); per-group tensors are ``(groups,)``.
"""

from __future__ import annotations

import torch


class Segments:
    """Rows grouped into ``num_groups`` groups (see module docstring).

    >>> seg = Segments(torch.tensor([0, 1, 0]), 2)
    >>> seg.sum(torch.tensor([1., 2., 3.])).tolist(), seg.expand(torch.tensor([10., 20.])).tolist()
    ([4.0, 2.0], [10.0, 20.0, 10.0])
    >>> dense = Segments.blocks(2, 2)
    >>> dense.sum(dense.rows(torch.tensor([1., 2., 3., 4.]))).tolist()
    [3.0, 7.0]
    """

    def __init__(self, gid: torch.Tensor | None, num_groups: int, size: int | None = None):
        if gid is None and size is None:
            raise ValueError("Segments needs a group index gid, or a block size for contiguous groups")
        self._gid = gid
        self.num_groups = int(num_groups)
        self.size = size  # G when the groups are contiguous blocks of one size
        self._device = gid.device if gid is not None else None

    @classmethod
    def blocks(cls, num_groups: int, size: int, device: torch.device | str | None = None) -> Segments:
        """Contiguous groups of ``size`` rows each (the ``(B, G)`` layout)."""
        seg = cls(None, num_groups, size)
        seg._device = torch.device(device) if device is not None else torch.device("cpu")
        return seg

    @property
    def dense(self) -> bool:
        """True when the groups are contiguous blocks of ``size`` rows."""
        return self.size is not None

    @property
    def gid(self) -> torch.Tensor:
        """The group of every row, ``(N,)`` int64 (built on first use when dense)."""
        if self._gid is None:
            assert self.size is not None  # the constructor takes a gid or a block size
            self._gid = torch.arange(self.num_groups, device=self._device).repeat_interleave(self.size)
        return self._gid

    @property
    def row_shape(self) -> tuple[int, ...]:
        """``(groups, size)`` when dense, else ``(rows,)``."""
        return (self.num_groups, self.size) if self.size is not None else (len(self.gid),)

    def rows(self, flat: torch.Tensor) -> torch.Tensor:
        """A flat per-row tensor in :attr:`row_shape` (a view)."""
        return flat.view(self.row_shape)

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """Per-group sum of per-row ``values``."""
        if self.dense:
            return values.sum(-1)
        out = torch.zeros(self.num_groups, dtype=values.dtype, device=values.device)
        return out.index_add_(0, self.gid, values)

    def max(self, values: torch.Tensor) -> torch.Tensor:
        """Per-group maximum (``-inf`` for a group without rows)."""
        if self.dense:
            if self.size == 0:
                return torch.full((self.num_groups,), -torch.inf, dtype=values.dtype, device=values.device)
            return values.amax(-1)
        out = torch.full((self.num_groups,), -torch.inf, dtype=values.dtype, device=values.device)
        return out.scatter_reduce_(0, self.gid, values, reduce="amax", include_self=True)

    def min(self, values: torch.Tensor) -> torch.Tensor:
        """Per-group minimum (``+inf`` for a group without rows)."""
        if self.dense:
            if self.size == 0:
                return torch.full((self.num_groups,), torch.inf, dtype=values.dtype, device=values.device)
            return values.amin(-1)
        out = torch.full((self.num_groups,), torch.inf, dtype=values.dtype, device=values.device)
        return out.scatter_reduce_(0, self.gid, values, reduce="amin", include_self=True)

    def count(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """Rows per group."""
        if self.size is not None:  # dense
            return torch.full((self.num_groups,), float(self.size), dtype=dtype, device=self._device)
        return torch.bincount(self.gid, minlength=self.num_groups).to(dtype)

    def expand(self, per_group: torch.Tensor) -> torch.Tensor:
        """A per-group tensor broadcast to the rows (a broadcast view when dense)."""
        return per_group.unsqueeze(-1) if self.dense else per_group.index_select(0, self.gid)


def as_segments(gid: torch.Tensor | Segments, num_groups: int | None = None) -> Segments:
    """``gid`` if it is already :class:`Segments`, else the index-driven segments of ``gid``."""
    if isinstance(gid, Segments):
        return gid
    if num_groups is None:
        raise ValueError("num_groups is required when gid is a tensor")
    return Segments(gid, num_groups)


def segment_sum(values: torch.Tensor, gid: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Sum of ``values`` per group.

    >>> segment_sum(torch.tensor([1., 2., 3.]), torch.tensor([0, 1, 0]), 2)
    tensor([4., 2.])
    """
    return Segments(gid, num_groups).sum(values)


def segment_max(values: torch.Tensor, gid: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Maximum of ``values`` per group (``-inf`` for an empty group).

    >>> segment_max(torch.tensor([1., 2., 3.]), torch.tensor([0, 1, 0]), 2)
    tensor([3., 2.])
    """
    return Segments(gid, num_groups).max(values)


def segment_min(values: torch.Tensor, gid: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Minimum of ``values`` per group (``+inf`` for an empty group)."""
    return Segments(gid, num_groups).min(values)
