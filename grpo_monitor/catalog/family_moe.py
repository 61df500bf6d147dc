"""The MoE routing family in one place (:data:`MOE`): ``grpo/moe/*`` — its records, its readout from the synced
routing counts and the report figure it declares.

Per valid token and MoE layer, the trainer's and the inference engine's top-k expert ids
(``observe_loss(routed_experts=, sampler_routed_experts=)``) are compared as sets; the counts
(``stats/routing.py::ROUTING_FIELDS``) ride the token vector, reduced once per step, and are read out
here. No trainer logs agreement (verl logs load balance ``rollout/moe/*_vio``, prime-rl
``routing_confidence``); NeMo-RL computes ``r3/routed_experts_fallback_token_route_fraction`` but does not
log it (docs/async_moe.md).

>>> from grpo_monitor.catalog.family import read_histograms, read_out
>>> v = {"moe_given": 4.0, "moe_fallback": 0.0, "moe_pairs": 4.0, "moe_match": 3.0, "moe_overlap": 7.0,
...      "moe_slots": 8.0, "moe_layers": 2.0, "moe_pairs_0": 2.0, "moe_pairs_1": 2.0, "moe_match_0": 2.0,
...      "moe_match_1": 1.0}
>>> read_out([MOE], "routing", v)["grpo/moe/agreement"], read_histograms([MOE], "routing", v)
(0.75, {'grpo/moe/agreement_by_layer': [1.0, 0.5]})
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .family import Family, FigureSpec, Panel, Readout
from .record import Metric
from .record import metric as _m

#: Layers with a per-layer slot pair; deeper layers count in the totals only (docs/async_moe.md).
MAX_LAYERS = 128
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


# --- the readout: plain floats of the synced routing counts -------------------------------------------------------


def layer_agreement(v: Mapping[str, float]) -> list[float]:
    """Agreement of each layer up to ``min(L, MAX_LAYERS)``, in layer order (NaN: no compared pair)."""
    layers = int(min(v.get("moe_layers", 0.0), MAX_LAYERS)) if math.isfinite(v.get("moe_layers", 0.0)) else 0
    return [v[f"moe_match_{i}"] / v[f"moe_pairs_{i}"] if v[f"moe_pairs_{i}"] > 0 else math.nan
            for i in range(layers)]


def routing_metrics(v: Mapping[str, float]) -> dict[str, float]:
    """``grpo/moe/*`` scalars of merged routing counts with a valid pair (``moe_given > 0``)."""
    out = {"grpo/moe/replay_fallback_frac": v["moe_fallback"] / v["moe_given"]}
    if v["moe_pairs"] > 0:
        out["grpo/moe/agreement"] = v["moe_match"] / v["moe_pairs"]
        out["grpo/moe/topk_overlap"] = v["moe_overlap"] / v["moe_slots"]
        finite = [a for a in layer_agreement(v) if math.isfinite(a)]
        if finite:
            out["grpo/moe/agreement_layer_min"] = min(finite)
    return out


def routing_histograms(v: Mapping[str, float]) -> dict[str, list[float]]:
    """The per-layer agreement histogram: the layers in order, leaving out a layer without a compared pair."""
    finite = [a for a in layer_agreement(v) if math.isfinite(a)] if v["moe_pairs"] > 0 else []
    return {"grpo/moe/agreement_by_layer": finite} if finite else {}


# --- the figure it declares ---------------------------------------------------------------------------------------

FIGURE = FigureSpec(
    "routing", "MoE routing agreement",
    panels=(
        Panel("lines", ("grpo/moe/agreement", "grpo/moe/topk_overlap", "grpo/moe/agreement_layer_min",
                        "grpo/moe/replay_fallback_frac"),
              "MoE routing: trainer vs inference engine", "share of (token, layer) pairs",
              labels=("same expert set (agreement)", "shared experts / k (topk_overlap)",
                      "worst layer (agreement_layer_min)", "engine route missing (fallback)"),
              colors=("blue", "green", "red", "orange"), styles=("-", "--", ":", "-."), share=True),
        Panel("heatmap", ("grpo/moe/agreement_by_layer",), "Agreement per layer (grpo/moe/agreement_by_layer)",
              "MoE layer", labels=("agreement",), share=True),
    ),
    caption="Share of (token, MoE layer) pairs where the trainer and the inference engine chose the same expert "
            "set; numerical noise alone (bf16 against float32) keeps it at 95-98% on the tiny MoEs of "
            "docs/async_moe.md, and the routing_disagreement finding opens when it falls well below its start",
    statements=(("the agreement", "grpo/moe/agreement", "{:.2%}"),),
    peaks=(("the share of missing engine routes", "grpo/moe/replay_fallback_frac", "{:.2%}"),),
    after="seq_ratio", note=False, height=2.8)

#: The family: records, the routing counts' readout (scalars and the per-layer histogram) and its figure.
MOE = Family("moe", tuple(moe_entries()),
             readouts=(Readout("routing", "moe_given", routing_metrics, histograms=routing_histograms),),
             figures=(FIGURE,))
