"""Sequence ratio, row ages and the drop bias on 2 gloo processes: every grpo/seq_ratio/* and grpo/offpolicy/*
key is the one of the union of the shards."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from dist_helpers import run_ranks
from dist_seq_ratio_worker import CLIP, TRAINED, seq_ratio_shard

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stats"))
from test_drop_bias import reference as reference_drop  # noqa: E402
from test_staleness import reference as reference_ages  # noqa: E402
from test_tokens import reference_seq_ratio  # noqa: E402

WORKER = Path(__file__).with_name("dist_seq_ratio_worker.py")


def test_two_ranks_report_the_sequence_ratio_of_the_union(tmp_path):
    """Both ranks report the seq_ratio, age and drop-bias keys of the concatenated shards (float64 reference):
    per-row sums reduce as sums, the extremes as min / max."""
    ranks = run_ranks("seq_ratio", tmp_path, worker=WORKER, timeout=120)
    parts = [seq_ratio_shard(r) for r in range(2)]
    x = {k: torch.cat([p[k] for p in parts]).numpy() for k in ("mask", "logprobs", "old_logprobs")}
    want = reference_seq_ratio(x["mask"] > 0, x["logprobs"], x["old_logprobs"], CLIP)
    assert 0 < want["grpo/seq_ratio/clip_frac"] < 1 and 0 < want["grpo/seq_ratio/tail_frac"] < 1
    want.update(reference_ages([p["policy_version"].numpy() for p in parts], TRAINED))
    want.update(reference_drop([dict(rewards=p["gen_rewards"], lengths=p["gen_lengths"], dropped=p["dropped"])
                                for p in parts]))
    assert "grpo/offpolicy/drop_length_z" in want
    assert want["grpo/offpolicy/age_max"] > max(TRAINED - p["policy_version"].min().item() for p in parts[:1])
    for r, result in enumerate(ranks):
        got = result["metrics"]
        for key, value in want.items():
            assert got[key] == pytest.approx(float(value), rel=1e-9, abs=1e-12), (r, key)
