"""The sampler's side on 2 gloo processes: mismatch, entropy, truncation and split keys of the union."""

from __future__ import annotations

import math

import pytest
import torch

from dist_helpers import run_ranks
from dist_sampler_worker import sampler_shard
from sampler_references import mismatch_reference, split_reference

WORKER = __import__("pathlib").Path(__file__).with_name("dist_sampler_worker.py")


def union() -> dict[str, torch.Tensor]:
    parts = [sampler_shard(r) for r in range(2)]
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}


def test_two_ranks_report_the_keys_of_the_union(tmp_path):
    """Both ranks report every grpo/mismatch/*, grpo/entropy/*, truncation and split key of the union,
    equal to the float64 reference over the concatenated shards (one collective per step)."""
    ranks = run_ranks("sampler", tmp_path, worker=WORKER, timeout=120)
    x = union()
    n = {k: v.double().numpy() for k, v in x.items()}
    want = mismatch_reference(n["mask"], n["sampler_logprobs"], old=n["old_logprobs"], entropy=n["entropy"])
    G = n["rewards"].shape[1]
    want.update(split_reference(n["rewards"], n["truncated"].reshape(-1, G), n["lengths"].reshape(-1, G)))
    for r, result in enumerate(ranks):
        got = result["metrics"]
        for key, value in want.items():
            assert key in got, f"rank {r}: {key} missing"
            assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12) or math.isnan(value), (r, key)
    assert ranks[0]["metrics"]["grpo/groups/degenerate_low_rate"] > 0  # rank 0's all-failed group
    assert ranks[0]["metrics"]["grpo/groups/degenerate_high_rate"] > 0  # rank 1's all-solved group
