"""Rebuild a step's groups from its recorded rows, in the layout the monitor takes fastest.

Grouping rules: rows sharing a group key (verl's ``uid`` or identical ``input``, TRL's
identical prompt, a generic group column) form one group; without a key, each run of
``--group-size`` consecutive rows is one. When ``--group-size G`` is given and a key holds
k·G rows (k ≥ 2: the same prompt drawn twice in one step), it is cut into k groups of G in
row order. Groups of other sizes are kept as they are, and the monitor's ``group_size``
invariant reports them.

The question of a group (its prompt, across steps) is named by a short digest of its
text, so the per-question history is keyed by small ids however long the prompts are.

>>> rows = StepRows(0, "0.jsonl", 1, np.array([1.0, 0.0, 1.0, 1.0]), ["a", "b", "a", "b"], ["a", "b", "a", "b"], None)
>>> g = build_groups(rows, None)
>>> g.rewards.tolist(), g.texts
([[1.0, 1.0], [0.0, 1.0]], ['a', 'b'])
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Hashable
from typing import Any

import numpy as np

from .columns import ScanInputError
from .rows import StepRows


@dataclasses.dataclass
class StepGroups:
    """One step, grouped: rewards ``(B, G)`` when every group has G rows, else flat with ``group_ids``."""

    step: int
    rewards: np.ndarray
    group_ids: np.ndarray | None
    advantages: np.ndarray | None
    question_ids: list[Hashable] | None
    texts: list[str] | None
    num_groups: int
    split_groups: int = 0
    #: the type names of the group values when they were of several types (kept apart, see ``factorize``)
    mixed_types: tuple[str, ...] = ()

    def observe_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``GRPOMonitor.observe_rollout`` (advantages only when recorded)."""
        kwargs: dict[str, Any] = {"rewards": self.rewards}
        if self.group_ids is not None:
            kwargs["group_ids"] = self.group_ids
        if self.advantages is not None:
            kwargs["advantages"] = self.advantages
        if self.question_ids is not None:
            kwargs["question_ids"] = self.question_ids
        return kwargs


def question_id(value: Any) -> Hashable:
    """A short, stable id of a question: a 12-hex-digit digest of a text, the value itself for an int id.

    >>> question_id("What is 2+2?")
    'f62029ad101d'
    >>> question_id(17)
    17
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()


def _display(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def factorize(keys: list[Any]) -> tuple[np.ndarray, int]:
    """Dense group index of each row (groups in order of first appearance) and the number of groups.

    Keys of different types are different groups (``1``, ``true`` and ``1.0`` are three: a
    dict would merge them); unhashable keys (chat messages as lists) are compared by their
    JSON text.

    >>> factorize(["b", "a", "b"])[0].tolist()
    [0, 1, 0]
    >>> factorize([1, True, 1.0, 1])[0].tolist()
    [0, 1, 2, 0]
    """
    if len(set(map(type, keys))) > 1:
        keys = list(zip(map(type, keys), keys, strict=True))
    try:
        index = {k: i for i, k in enumerate(dict.fromkeys(keys))}  # C-level passes over the rows
    except TypeError:  # unhashable keys (chat messages as lists): compare their JSON text
        keys = [(type(k), _display(k)) for k in keys]
        index = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    return np.fromiter(map(index.__getitem__, keys), dtype=np.int64, count=len(keys)), len(index)


def check_group_keys(rows: StepRows) -> tuple[str, ...]:
    """The type names of the step's group values when they are of several types (else ``()``).

    A null or NaN group value is a :class:`ScanInputError`: a NaN equals nothing, not even
    itself, so its rows would be grouped by chance; a null is no group at all.
    """
    keys = rows.groups or []
    types = set(map(type, keys))
    if type(None) in types or float in types or any(issubclass(t, np.floating) for t in types):
        for i, key in enumerate(keys):
            if key is None or (isinstance(key, (float, np.floating)) and key != key):
                what = "null" if key is None else "NaN"
                raise ScanInputError(
                    f"{rows.where()}: row {i + 1} of step {rows.step} (counting from that line) has the group id "
                    f"{what}; every row needs a group id that equals itself: fix the records, or name another "
                    "field with --columns group=FIELD (or pass --group-size G for groups of G consecutive rows)")
    return tuple(sorted(t.__name__ for t in types)) if len(types) > 1 else ()


def split_repeated(gid: np.ndarray, group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Cut each group of k·G rows (k ≥ 2) into k groups of G in row order.

    Returns the new dense index and, per new group, the old group it came from.

    >>> new, parent = split_repeated(np.array([0, 0, 0, 0, 1, 1]), 2)
    >>> new.tolist(), parent.tolist()
    ([0, 0, 1, 1, 2, 2], [0, 0, 1])
    """
    sizes = np.bincount(gid)
    splittable = (sizes > group_size) & (sizes % group_size == 0)
    if not splittable.any():
        return gid, np.arange(len(sizes))
    order = np.argsort(gid, kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rank = np.empty_like(gid)
    rank[order] = np.arange(len(gid)) - starts[gid[order]]
    sub = np.where(splittable[gid], rank // group_size, 0)
    width = int(sub.max()) + 1
    keys, new = np.unique(gid * width + sub, return_inverse=True)
    return new.astype(np.int64), keys // width


def build_groups(rows: StepRows, group_size: int | None) -> StepGroups:
    """The monitor's inputs for ``rows`` (see the module docstring for the rules)."""
    if rows.groups is None:
        return _consecutive(rows, group_size)
    mixed = check_group_keys(rows)
    gid, _ = factorize(rows.groups)
    parent = None
    if group_size is not None:
        gid, parent = split_repeated(gid, group_size)
    num_groups = int(gid.max()) + 1 if len(gid) else 0
    first = np.unique(gid, return_index=True)[1]
    texts = [_display(rows.questions[i]) for i in first] if rows.questions is not None else None
    qids = [question_id(rows.questions[i]) for i in first] if rows.questions is not None else None
    sizes = np.bincount(gid, minlength=num_groups)
    split = int(num_groups - len(np.unique(parent))) if parent is not None else 0
    if num_groups and (sizes == sizes[0]).all():
        order = np.argsort(gid, kind="stable")
        shape = (num_groups, int(sizes[0]))
        adv = rows.advantages[order].reshape(shape) if rows.advantages is not None else None
        return StepGroups(rows.step, rows.rewards[order].reshape(shape), None, adv, qids, texts, num_groups, split,
                          mixed)
    return StepGroups(rows.step, rows.rewards, gid, rows.advantages, qids, texts, num_groups, split, mixed)


def _consecutive(rows: StepRows, group_size: int | None) -> StepGroups:
    """Groups of ``group_size`` consecutive rows (no group column)."""
    n = rows.num_rows
    if group_size is None:
        raise ScanInputError(f"{rows.where()}: the rows carry no group column; pass --group-size G (each group is G "
                             "consecutive rows) or name the column with --columns group=FIELD")
    if n % group_size:
        raise ScanInputError(f"{rows.where()}: step {rows.step} has {n} rows, not a multiple of --group-size "
                             f"{group_size}; pass the right --group-size or a group column (--columns group=FIELD)")
    b = n // group_size
    adv = rows.advantages.reshape(b, group_size) if rows.advantages is not None else None
    q = rows.questions[::group_size] if rows.questions is not None else None
    texts = [_display(x) for x in q] if q is not None else None
    qids = [question_id(x) for x in q] if q is not None else None
    return StepGroups(rows.step, rows.rewards.reshape(b, group_size), None, adv, qids, texts, b)
