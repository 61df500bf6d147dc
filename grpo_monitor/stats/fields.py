"""Fixed layouts of reducible statistics: each slot is a sum, a minimum or a maximum.

Storing sums, counts and extrema (never means) makes merging micro-batches, rollouts
and ranks one generic elementwise step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

_OP_CODES = {"sum": 0, "min": 1, "max": 2}
_EMPTY = {"sum": 0.0, "min": float("inf"), "max": float("-inf")}


class FieldLayout:
    """Names and reductions of a statistics vector.

    >>> lay = FieldLayout((("n", "sum"), ("hi", "max")))
    >>> lay.combine(torch.tensor([1., 2.], dtype=torch.float64), torch.tensor([3., 1.], dtype=torch.float64)).tolist()
    [4.0, 2.0]
    """

    def __init__(self, fields: Sequence[tuple[str, str]]):
        self.fields = tuple(fields)
        self.names = tuple(name for name, _ in self.fields)
        self._slots = {name: i for i, name in enumerate(self.names)}
        self._codes = [_OP_CODES[op] for _, op in self.fields]
        self._ops: dict[torch.device, torch.Tensor] = {}
        self._identity: dict[torch.device, torch.Tensor] = {}
        self._index: dict[tuple[tuple[str, ...], torch.device], torch.Tensor] = {}  # pack_blocks' slot indices

    def __len__(self) -> int:
        return len(self.fields)

    def ops(self, device: torch.device) -> torch.Tensor:
        """Op codes per slot (0 sum, 1 min, 2 max) on ``device``, cached."""
        if device not in self._ops:
            self._ops[device] = torch.tensor(self._codes, device=device)
        return self._ops[device]

    def empty(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """The identity vector: 0 for sums, +inf for minima, -inf for maxima."""
        return torch.tensor([_EMPTY[op] for _, op in self.fields], dtype=torch.float64, device=device)

    def identity(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """:meth:`empty`, built once per device (read it, never write into it: it is shared)."""
        key = torch.device(device)
        if key not in self._identity:
            self._identity[key] = self.empty(key)
        return self._identity[key]

    def combine(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Merge two vectors slot by slot (stacked inputs of shape (k, n) are reduced on dim 0 too)."""
        return self.reduce(torch.stack([a, b.to(a.device)]))

    def reduce(self, stacked: torch.Tensor) -> torch.Tensor:
        """Reduce ``(k, n)`` stacked vectors over dim 0, slot by slot."""
        ops = self.ops(stacked.device)
        return torch.where(
            ops == 0, stacked.sum(0), torch.where(ops == 1, stacked.amin(0), stacked.amax(0))
        )

    def pack(self, values: Mapping[str, torch.Tensor | float], device: torch.device | str = "cpu") -> torch.Tensor:
        """The float64 vector of ``values`` by name; absent slots at their identity. No host copy.

        >>> FieldLayout((("n", "sum"), ("hi", "max"))).pack({"n": 3.0}).tolist()
        [3.0, -inf]
        """
        unknown = set(values) - set(self.names)
        if unknown:
            raise KeyError(f"no slots named {sorted(unknown)} in this layout; expected names from {list(self.names)}")
        slots = self._slots
        host = [_EMPTY[op] for _, op in self.fields]
        by_dtype: dict[torch.dtype, tuple[list[int], list[torch.Tensor]]] = {}
        for name, v in values.items():
            if isinstance(v, torch.Tensor):
                where, ts = by_dtype.setdefault(v.dtype, ([], []))
                where.append(slots[name])
                ts.append(v if v.dim() == 0 else v.reshape(()))
            else:
                host[slots[name]] = v
        out = torch.tensor(host, dtype=torch.float64, device=device)
        for where, ts in by_dtype.values():  # one stack per dtype, then one exact cast to float64 (no promotion)
            out[torch.tensor(where, device=device)] = torch.stack(ts).to(device, torch.float64)
        return out

    def pack_blocks(self, values: Mapping[str, torch.Tensor | float],
                    blocks: Sequence[tuple[tuple[str, ...], torch.Tensor]], device: torch.device | str = "cpu",
                    ) -> torch.Tensor:
        """:meth:`pack`, plus ``blocks``: (names, a vector of their values in that order) placed whole (one indexed
        copy each, the slot indices built once per names), so a caller reduces many slots in one operation."""
        out = self.pack(values, device)
        for names, vec in blocks:
            key = (names, out.device)
            if key not in self._index:
                self._index[key] = torch.tensor([self._slots[n] for n in names], device=out.device)
            out[self._index[key]] = vec.to(out.device, torch.float64)
        return out

    def to_dict(self, values: Sequence[float]) -> dict[str, float]:
        """``{name: value}`` for host values in this layout."""
        return dict(zip(self.names, values, strict=True))
