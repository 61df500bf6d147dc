"""Routing agreement on 2 gloo processes: every grpo/moe/* key is the one of the union of the shards."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dist_helpers import run_ranks
from dist_routing_worker import routing_shard

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stats"))
from test_routing import reference  # noqa: E402

WORKER = Path(__file__).with_name("dist_routing_worker.py")


@pytest.mark.parametrize("scenario", ["mixed", "idle"])
def test_two_ranks_report_the_routing_agreement_of_the_union(scenario, tmp_path):
    """Both ranks report the keys and the per-layer histogram of the shards they observed together (a rank with a
    micro-batch without routing, or with none at all, adds nothing and still joins the one collective)."""
    ranks = run_ranks(scenario, tmp_path, worker=WORKER, timeout=120)
    shards = [routing_shard(r) for r in ((0, 1) if scenario == "mixed" else (0,))]
    want, per_layer = reference([(s["mask"], s["routed_experts"], s["sampler_routed_experts"]) for s in shards])
    assert 0 < want["grpo/moe/agreement"] < 1 and 0 < want["grpo/moe/replay_fallback_frac"] < 1
    for r, result in enumerate(ranks):
        got = {k: v for k, v in result["metrics"].items() if k.startswith("grpo/moe/")}
        assert got.keys() == want.keys(), r
        for key, value in want.items():
            assert got[key] == pytest.approx(value, rel=1e-12), (r, key)
        assert result["histograms"]["grpo/moe/agreement_by_layer"] == pytest.approx(per_layer, rel=1e-12), r
