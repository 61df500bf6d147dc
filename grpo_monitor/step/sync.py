"""The one place the monitor leaves the device: ``sync_step`` -> a frozen :class:`SyncedStep`.

When it happens: once per ``end_step`` (everything the step gathered), and, with the
default eager checks (``defer_checks=False``), once per ``observe_rollout`` for that
rollout's statistics only, so a broken batch is stopped before the optimizer step. Each
sync is ONE collective (when distributed) and ONE device-to-host copy. A breach found by
an eager check adds a local sync of the rest of the step (no collective: the other ranks
are not waiting for one) so its report carries the ledger and per-question metrics too.
"""

from __future__ import annotations

import dataclasses

import torch

from ..stats.fields import FieldLayout
from .accumulator import LEDGER, ROLLOUT, Accumulator, HostGroups, RolloutRecord
from .distributed import all_reduce_fields, gather_objects, rank_and_world


@dataclasses.dataclass(frozen=True)
class SyncedStep:
    """Host values of one sync, by name.

    ``rollout`` holds the statistics of the rollouts synced now (``records``, not checked
    yet); ``None`` when there were none. ``ledger``, ``tokens`` and ``groups`` are set by a
    final sync only (``tokens`` stays ``None`` when no rank observed tokens).
    """

    rollout: dict[str, float] | None
    rollout_vec: torch.Tensor | None
    records: tuple[RolloutRecord, ...]
    ledger: dict[str, float] | None = None
    tokens: dict[str, float] | None = None
    groups: HostGroups | None = None
    weights: torch.Tensor | None = None  # the step's loss-weight rows (grpo_monitor.step.weights), this rank's
    all_weights: tuple | None = None  # every rank's rows (numpy arrays or None), in rank order, on several ranks

    @property
    def has_rollout(self) -> bool:
        return self.rollout is not None and self.rollout["groups"] > 0


def sync_step(acc: Accumulator, token_layout: FieldLayout | None, *, global_scope: bool, final: bool,
              collective: bool = True, weights: torch.Tensor | None = None) -> SyncedStep:
    """Sync the pending rollout statistics and, when ``final``, the ledger, tokens and per-group arrays.

    ``global_scope`` (``rollout_scope="global"``: every rank holds the whole rollout) keeps
    the rollout and ledger slots local instead of reducing them; ``collective=False`` skips
    every cross-rank step. ``weights`` (a final sync's loss-weight rows) rides the same host copy.
    """
    device = acc.device or torch.device("cpu")
    parts = [("rollout", ROLLOUT, acc.rollout_pending, global_scope)]
    if final:
        parts.append(("ledger", LEDGER, acc.ledger, global_scope))
        if token_layout is not None:
            parts.append(("tokens", token_layout, acc.tokens, False))
    vec = torch.cat([(v if v is not None else lay.identity(device)).to(device) for _, lay, v, _ in parts])
    if collective:
        vec = all_reduce_fields(vec, *_joined(tuple((lay, g) for _, lay, _, g in parts)))
    arrays = ([weights] if final and weights is not None else []) + (acc.group_arrays() if final else [])
    host = torch.cat([vec] + [a.reshape(-1).to(device, torch.float64) for a in arrays]).cpu()
    pieces, offset = {}, 0
    for name, lay, _, _ in parts:
        pieces[name] = host[offset:offset + len(lay)]
        offset += len(lay)
    rollout = pieces["rollout"]
    has_rollout = acc.rollout_pending is not None or (collective and rank_and_world()[1] > 1)
    out = SyncedStep(ROLLOUT.to_dict(rollout.tolist()) if has_rollout else None, rollout if has_rollout else None,
                     tuple(acc.pending_rollouts()))
    if not final:
        return out
    weight_rows = None
    if weights is not None:
        weight_rows, offset = host[offset:offset + weights.numel()], offset + weights.numel()
    groups = acc.host_groups(host[offset:].numpy())
    all_weights = None
    if collective and rank_and_world()[1] > 1:  # every rank joins: one object gather (rows, and shard groups)
        mine = weight_rows.numpy() if weight_rows is not None else None
        gathered = gather_objects((None if global_scope else groups, mine))
        all_weights = tuple(w for _, w in gathered)
        if not global_scope:
            groups = HostGroups.union([g for g, _ in gathered])
    return dataclasses.replace(
        out, ledger=LEDGER.to_dict(pieces["ledger"].tolist()), tokens=_tokens(pieces.get("tokens"), acc, token_layout),
        groups=groups, weights=weight_rows, all_weights=all_weights,
    )


_JOINED: dict[tuple, tuple[tuple, FieldLayout, torch.Tensor]] = {}
_JOINED_KEPT = 8  # combinations remembered (each monitor has its own token layout)


def _joined(parts: tuple[tuple[FieldLayout, bool], ...]) -> tuple[FieldLayout, torch.Tensor]:
    """The one layout of the synced parts (each layout, and whether it stays local) and which slots stay local,
    built once per combination (looked up by the layouts' identities, which the entry keeps alive)."""
    key = tuple((id(lay), g) for lay, g in parts)
    entry = _JOINED.get(key)
    if entry is None:
        if len(_JOINED) >= _JOINED_KEPT:
            _JOINED.clear()
        entry = _JOINED[key] = (parts, FieldLayout([f for lay, _ in parts for f in lay.fields]),
                                torch.cat([torch.full((len(lay),), g) for lay, g in parts]))
    return entry[1], entry[2]


def _tokens(vec: torch.Tensor | None, acc: Accumulator, layout: FieldLayout | None) -> dict[str, float] | None:
    if vec is None or layout is None:
        return None
    if acc.tokens is None and torch.equal(vec, layout.identity()):
        return None  # no rank observed tokens this step
    return layout.to_dict(vec.tolist())


def union_groups(groups: HostGroups) -> HostGroups:
    """This rank's per-group arrays, or with shards on several ranks every rank's (an object
    gather at the end of the step: the per-question history and histograms see the union)."""
    if rank_and_world()[1] == 1:
        return groups
    return HostGroups.union(gather_objects(groups))
