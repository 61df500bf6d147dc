"""MoE routing agreement in the catalogue: ``grpo/moe/*`` (part of :data:`grpo_monitor.catalog.metrics.METRICS`).

Per valid token and MoE layer, the trainer's and the inference engine's top-k expert ids
(``observe_loss(routed_experts=, sampler_routed_experts=)``) are compared as sets; the counts
ride the token vector, reduced once per step (:mod:`grpo_monitor.stats.routing`). No trainer
logs agreement (verl logs load balance ``rollout/moe/*_vio``, prime-rl ``routing_confidence``);
NeMo-RL computes ``r3/routed_experts_fallback_token_route_fraction`` but does not log it
(docs/async_moe.md).
"""

from __future__ import annotations

from .record import Metric
from .record import metric as _m

_NEEDS = "routed_experts, sampler_routed_experts"
_PAIRS = "mean weighted by compared (token, layer) pairs"


def moe_entries() -> list[Metric]:
    """``grpo/moe/*``: integer counts of the compared (token, layer) pairs, summed over micro-batches and ranks."""
    moe = dict(section="Mismatch", source="observe_loss", needs=_NEEDS)
    ratio = "ratio of integer counts summed over micro-batches and ranks"
    panel = "MoE routing: trainer vs engine"
    return [
        _m("grpo/moe/agreement", "fraction", ratio, _PAIRS, "Share of valid (token, MoE layer) pairs whose top-k "
           "expert set is the same in the trainer and in the inference engine (engine routes missing excluded). "
           "Numerical noise alone keeps it near 1 (bf16 against float32 of the same weights: 95-98% on tiny MoEs, "
           "lower with more experts; docs/async_moe.md); the routing_disagreement finding opens when the "
           "disagreement triples from its start or agreement falls under 0.5.", panel=panel,
           only_when="every engine route missing", **moe),
        _m("grpo/moe/topk_overlap", "fraction", ratio, _PAIRS, "Mean over the compared pairs of |trainer set & "
           "engine set| / k: the share of the chosen experts both sides share (at least agreement).", panel=panel,
           only_when="every engine route missing", **moe),
        _m("grpo/moe/agreement_layer_min", "fraction", ratio, "min", "Agreement of the worst MoE layer (layers "
           "past the first 128 count in grpo/moe/agreement only).", panel=panel,
           only_when="every engine route missing", **moe),
        _m("grpo/moe/agreement_by_layer", "fraction", ratio, "one histogram per step", "Agreement of each MoE "
           "layer in layer order (a layer without a compared pair left out; the first 128 layers): a few layers "
           "far below the rest point at a router those layers compute differently.", kind="histogram",
           only_when="every engine route missing", **moe),
        _m("grpo/moe/replay_fallback_frac", "fraction", ratio, "mean weighted by valid (token, layer) pairs",
           "Share of valid (token, layer) pairs whose engine route is missing (a negative id: NeMo-RL's all -1 "
           "sentinel), on which router replay (R3) falls back to the trainer's own router; NeMo-RL computes "
           "r3/routed_experts_fallback_token_route_fraction but does not log it. Should be about 0.", **moe),
    ]
