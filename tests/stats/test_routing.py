"""MoE routing agreement: every grpo/moe/* key equals a set-by-set Python count, across micro-batches and odd inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.errors import InputTypeError, InputValueError
from grpo_monitor.stats.routing import MAX_LAYERS


def reference(batches) -> tuple[dict[str, float], list[float]]:
    """grpo/moe/* of ``(mask, trainer, engine)`` batches by Python sets over every valid (token, layer) pair."""
    given = fallback = pairs = match = 0
    overlap = 0.0
    layer_pairs: dict[int, int] = {}
    layer_match: dict[int, int] = {}
    for mask, a, b in batches:
        a, b, valid = np.asarray(a).tolist(), np.asarray(b).tolist(), (np.asarray(mask) > 0).tolist()
        for i, row in enumerate(valid):
            for t, ok in enumerate(row):
                if not ok:
                    continue
                for layer, (ta, tb) in enumerate(zip(a[i][t], b[i][t], strict=True)):
                    given += 1
                    if any(e < 0 for e in tb):
                        fallback += 1
                        continue
                    sa, sb = set(ta), set(tb)
                    pairs += 1
                    match += sa == sb
                    overlap += len(sa & sb) / len(ta)
                    layer_pairs[layer] = layer_pairs.get(layer, 0) + 1
                    layer_match[layer] = layer_match.get(layer, 0) + (sa == sb)
    if given == 0:
        return {}, []
    out = {"grpo/moe/replay_fallback_frac": fallback / given}
    per_layer = [layer_match[k] / layer_pairs[k] for k in sorted(layer_pairs) if k < MAX_LAYERS]
    if pairs:
        out.update({"grpo/moe/agreement": match / pairs, "grpo/moe/topk_overlap": overlap / pairs,
                    "grpo/moe/agreement_layer_min": min(per_layer)})
    return out, per_layer


def _ids(gen: torch.Generator, shape: tuple[int, ...], experts: int) -> torch.Tensor:
    """Distinct top-k ids per (token, layer), as a router gives them."""
    *lead, k = shape
    n = int(np.prod(lead))
    return torch.stack([torch.randperm(experts, generator=gen)[:k] for _ in range(n)]).reshape(shape)


def _batch(kind: str, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    B, T, L, k, E = 5, 7, 3, 2, 6
    mask = (torch.rand(B, T, generator=gen) < 0.8).float()
    a = _ids(gen, (B, T, L, k), E)
    b = a.clone()
    flip = torch.rand(B, T, L, generator=gen) < 0.3
    b[flip] = _ids(gen, (int(flip.sum()), k), E)
    if kind == "permuted":  # the same sets in another order: agreement 1
        b = a.flip(-1)
    elif kind == "duplicates":  # a side listing an expert twice: its set is smaller
        a[0, :, :, 1] = a[0, :, :, 0]
        b[1, :, :, 0] = b[1, :, :, 1]
    elif kind == "fallback":  # missing engine routes: NeMo-RL's all -1 sentinel, and a partly negative route
        b[2] = -1
        b[3, :, 0, 1] = -1
    elif kind == "all_missing":
        b[:] = -1
    elif kind == "garbage_padding":  # padding holds any ids, masked out
        a[mask == 0] = 10**9
        b[mask == 0] = -(10**9)
    elif kind == "int32_large_ids":
        a, b = (a * 100_003).to(torch.int32), (b * 100_003).to(torch.int32)
    elif kind == "empty_mask":
        mask = torch.zeros_like(mask)
    return mask, a, b


KINDS = ["random", "permuted", "duplicates", "fallback", "all_missing", "garbage_padding", "int32_large_ids",
         "empty_mask"]


def _run(batches, splits=None):
    mon = GRPOMonitor(MonitorConfig(strict=True))
    for mask, a, b in batches:
        for part in (splits or [slice(None)]):
            mon.observe_loss(mask=mask[part], routed_experts=a[part], sampler_routed_experts=b[part])
    report = mon.end_step()
    return report.metrics, report.histograms


@pytest.mark.parametrize("kind", KINDS)
def test_keys_equal_a_set_by_set_count(kind):
    """Each key against the Python-set reference: random, permuted, duplicate, missing-route and padded batches."""
    batches = [_batch(kind, seed) for seed in (0, 1)]
    want, per_layer = reference(batches)
    metrics, hists = _run(batches)
    got = {k: v for k, v in metrics.items() if k.startswith("grpo/moe/")}
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
    assert hists.get("grpo/moe/agreement_by_layer", []) == pytest.approx(per_layer, rel=1e-12)
    if kind == "permuted":
        assert got["grpo/moe/agreement"] == 1.0 and got["grpo/moe/topk_overlap"] == 1.0
    if kind == "random":
        assert 0.5 < got["grpo/moe/agreement"] < 0.9


@pytest.mark.parametrize("splits", [[slice(0, 1), slice(1, None)], [slice(0, 3), slice(3, 4), slice(4, None)]],
                         ids=["1+4 rows", "3+1+1 rows"])
def test_micro_batches_merge_exactly(splits):
    """Uneven micro-batches give the same keys, bit for bit (integer counts summed)."""
    batches = [_batch("fallback", 3)]
    whole, _ = _run(batches)
    parts, _ = _run(batches, splits)
    assert {k: v for k, v in parts.items() if "moe" in k} == {k: v for k, v in whole.items() if "moe" in k}


def test_layers_past_the_cap_count_in_the_totals():
    """Layers beyond MAX_LAYERS add to agreement but not to the per-layer figures."""
    gen = torch.Generator().manual_seed(5)
    L = MAX_LAYERS + 3
    mask = torch.ones(2, 2)
    a = _ids(gen, (2, 2, L, 2), 8)
    b = a.clone()
    b[:, :, MAX_LAYERS:] = _ids(gen, (2, 2, 3, 2), 8) + 8  # disjoint ids: the deep layers never agree
    want, per_layer = reference([(mask, a, b)])
    metrics, hists = _run([(mask, a, b)])
    assert metrics["grpo/moe/agreement"] == pytest.approx(want["grpo/moe/agreement"])
    assert want["grpo/moe/agreement"] < 1
    assert metrics["grpo/moe/agreement_layer_min"] == 1.0 and len(hists["grpo/moe/agreement_by_layer"]) == MAX_LAYERS
    assert per_layer == [1.0] * MAX_LAYERS


def test_without_routing_no_key():
    """A micro-batch without routed experts emits no grpo/moe/* key."""
    mon = GRPOMonitor(MonitorConfig(strict=True))
    mon.observe_loss(mask=torch.ones(2, 3), logprobs=-torch.ones(2, 3))
    metrics = mon.end_step().metrics
    assert not any(k.startswith("grpo/moe/") for k in metrics) and "grpo/tokens/valid" in metrics
    assert not math.isnan(metrics["grpo/tokens/valid"])


_IDS = torch.zeros(2, 3, 4, 2, dtype=torch.long)
BAD = {
    "only trainer": (dict(routed_experts=_IDS), InputValueError, "given without sampler_routed_experts"),
    "only engine": (dict(sampler_routed_experts=_IDS), InputValueError, "given without routed_experts"),
    "float ids": (dict(routed_experts=_IDS.float(), sampler_routed_experts=_IDS), InputTypeError, "integer expert"),
    "bool ids": (dict(routed_experts=_IDS, sampler_routed_experts=_IDS.bool()), InputTypeError, "integer expert"),
    "3-D": (dict(routed_experts=_IDS[..., 0], sampler_routed_experts=_IDS[..., 0]), InputValueError, "(2, 3, 'L'"),
    "other rows": (dict(routed_experts=_IDS[:1], sampler_routed_experts=_IDS[:1]), InputValueError,
                   "but mask has shape (2, 3)"),
    "other k": (dict(routed_experts=_IDS, sampler_routed_experts=_IDS[..., :1]), InputValueError, "same top-k"),
    "other layers": (dict(routed_experts=_IDS, sampler_routed_experts=_IDS[:, :, :3]), InputValueError,
                     "same layers L"),
}


@pytest.mark.parametrize("kwargs, error, words", list(BAD.values()), ids=list(BAD))
def test_bad_routing_input_raises_a_worded_error(kwargs, error, words):
    """Each mistake raises the user's error naming the argument, before anything is stored."""
    mon = GRPOMonitor(MonitorConfig(strict=True))
    with pytest.raises(error, match=None) as info:
        mon.observe_loss(mask=torch.ones(2, 3), **kwargs)
    assert words in str(info.value)
    assert mon.end_step().metrics.get("grpo/tokens/valid") is None
