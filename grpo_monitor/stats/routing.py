"""MoE routing agreement: per token and MoE layer, do the trainer and the inference engine pick the same experts?

``observe_loss(..., routed_experts=, sampler_routed_experts=)`` takes two integer tensors
``(B, T, L, k)``: the top-k expert ids each side chose for every token and MoE layer. A
(token, layer) pair counts when the token is valid (``mask > 0``); a pair whose engine route
holds a negative id is a *missing* route (NeMo-RL's all ``-1`` sentinel, on which router
replay falls back to the trainer's own router) and is counted apart, not compared. For the
compared pairs, with A and B the two expert *sets* (ids deduplicated, order ignored):

- agreement: the share of pairs with A == B;
- top-k overlap: the mean of |A & B| / k.

``routing_vector`` reduces one micro-batch to integer counts (slots ``ROUTING_FIELDS``,
float64 holds them exactly up to 2^53) that merge across micro-batches and ranks by sum; the
MoE family's readout (:mod:`grpo_monitor.catalog.family_moe`) turns the merged counts into
``grpo/moe/*``. No host sync, no data-dependent shapes: every (token, layer) pair is computed and
weighted by validity.
"""

from __future__ import annotations

import torch

from ..catalog.family_moe import MAX_LAYERS
from .fields import FieldLayout

_TOTALS = ("moe_given", "moe_fallback", "moe_pairs", "moe_match", "moe_overlap", "moe_slots")
ROUTING_FIELDS: tuple[tuple[str, str], ...] = (
    *((name, "sum") for name in _TOTALS), ("moe_layers", "max"),
    *((f"moe_pairs_{i}", "sum") for i in range(MAX_LAYERS)), *((f"moe_match_{i}", "sum") for i in range(MAX_LAYERS)),
)
ROUTING_LAYOUT = FieldLayout(ROUTING_FIELDS)


def validate_routing(mask: torch.Tensor, routed: torch.Tensor | None, sampler: torch.Tensor | None) -> None:
    """Worded errors for ``routed_experts`` / ``sampler_routed_experts`` against ``mask`` ``(B, T)``; metadata only.

    >>> validate_routing(torch.ones(2, 3), torch.zeros(2, 3, 4, 2, dtype=torch.long),
    ...                  torch.zeros(2, 3, 4, 2, dtype=torch.long))
    """
    if (routed is None) != (sampler is None):
        given, missing = ("routed_experts", "sampler_routed_experts") if sampler is None else \
            ("sampler_routed_experts", "routed_experts")
        raise ValueError(f"{given} was given without {missing}; routing agreement compares the trainer's "
                         "top-k experts (routed_experts) with the inference engine's (sampler_routed_experts)")
    for name, t in (("routed_experts", routed), ("sampler_routed_experts", sampler)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor (B, T, L, k) of expert ids, but got {type(t).__name__}")
        if t.dtype == torch.bool or t.is_floating_point() or t.is_complex():
            raise TypeError(f"{name} must hold integer expert ids, but has dtype {t.dtype}")
        want = (*mask.shape, "L", "k")
        if t.dim() != 4 or tuple(t.shape[:2]) != tuple(mask.shape) or t.shape[2] < 1 or t.shape[3] < 1:
            raise ValueError(f"{name} has shape {tuple(t.shape)} but mask has shape {tuple(mask.shape)}; expected "
                             f"{want}: the top-k expert ids per token and MoE layer")
        if t.device != mask.device:
            raise ValueError(f"{name} is on {t.device} but mask is on {mask.device}; pass it on mask's device")
    assert routed is not None and sampler is not None
    if routed.shape != sampler.shape:
        raise ValueError(f"routed_experts has shape {tuple(routed.shape)} but sampler_routed_experts has shape "
                         f"{tuple(sampler.shape)}; both sides need the same layers L and the same top-k k")


def _first(ids: torch.Tensor) -> torch.Tensor:
    """Per slot of the last dim: the first occurrence of its id in that top-k (duplicates count once)."""
    k = ids.shape[-1]
    first = torch.ones_like(ids, dtype=torch.bool)
    for i in range(1, k):
        first[..., i] = ~(ids[..., i:i + 1] == ids[..., :i]).any(-1)
    return first


def pair_counts(routed: torch.Tensor, sampler: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per (token, layer): |A & B|, whether A == B as sets, whether the engine route is missing (a negative id).

    >>> a = torch.tensor([[[[1, 2]], [[3, 4]]]]); b = torch.tensor([[[[2, 1]], [[3, 5]]]])
    >>> [t.flatten().tolist() for t in pair_counts(a, b)]
    [[2, 1], [True, False], [False, False]]
    """
    fa, fb = _first(routed), _first(sampler)
    inter = torch.zeros(routed.shape[:-1], dtype=torch.int64, device=routed.device)
    for i in range(routed.shape[-1]):
        inter += (fa[..., i] & (routed[..., i:i + 1] == sampler).any(-1)).to(torch.int64)
    same = (inter == fa.sum(-1)) & (inter == fb.sum(-1))
    return inter, same, (sampler < 0).any(-1)


def routing_vector(mask: torch.Tensor, routed: torch.Tensor, sampler: torch.Tensor) -> torch.Tensor:
    """The ``ROUTING_FIELDS`` counts of one micro-batch as a float64 vector on ``mask``'s device
    (``validate_routing`` first). No host sync.

    >>> m = torch.ones(1, 2); a = torch.tensor([[[[1, 2]], [[3, 4]]]]); b = torch.tensor([[[[2, 1]], [[3, 5]]]])
    >>> {k: v for k, v in ROUTING_LAYOUT.to_dict(routing_vector(m, a, b).tolist()).items() if "match" in k}["moe_match"]
    1.0
    """
    inter, same, missing = pair_counts(routed, sampler)
    given = (mask > 0).unsqueeze(-1).expand(missing.shape)
    compared = given & ~missing
    per_pairs, per_match = compared.sum((0, 1)), (compared & same).sum((0, 1))  # (L,), int64
    layers, k = routed.shape[2], routed.shape[3]
    pairs = per_pairs.sum()
    totals = torch.stack([given.sum(), (given & missing).sum(), pairs, per_match.sum(),
                          torch.where(compared, inter, 0).sum(), pairs * k, torch.full_like(pairs, layers)])
    keep = min(layers, MAX_LAYERS)
    pad = torch.zeros(MAX_LAYERS - keep, dtype=torch.int64, device=pairs.device)
    return torch.cat([totals, per_pairs[:keep], pad, per_match[:keep], pad]).to(torch.float64)
