"""torch.distributed helpers: who we are, one collective that reduces a stats vector, and an object gather."""

from __future__ import annotations

from typing import Any

import torch

from ..stats.fields import FieldLayout


def rank_and_world() -> tuple[int, int]:
    """(rank, world size); (0, 1) when no process group is initialised."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_reduce_fields(vec: torch.Tensor, layout: FieldLayout, keep_local: torch.Tensor | None = None) -> torch.Tensor:
    """Reduce ``vec`` across ranks by each slot's op in ONE all-gather.

    Slots where ``keep_local`` is True keep this rank's value (data every rank already
    holds, e.g. a gathered rollout with ``rollout_scope="global"``).
    """
    import torch.distributed as dist

    _, world = rank_and_world()
    if world == 1:
        return vec
    gathered = [torch.empty_like(vec) for _ in range(world)]
    dist.all_gather(gathered, vec.contiguous())
    reduced = layout.reduce(torch.stack(gathered))
    return reduced if keep_local is None else torch.where(keep_local.to(vec.device), vec, reduced)


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj`` in rank order (pickled through ``all_gather_object``); ``[obj]`` alone.

    With NCCL, torch moves the pickles through the current CUDA device: call
    ``torch.cuda.set_device`` for the rank first, as any NCCL job does.
    """
    import torch.distributed as dist

    _, world = rank_and_world()
    if world == 1:
        return [obj]
    out: list[Any] = [None] * world
    dist.all_gather_object(out, obj)
    return out
