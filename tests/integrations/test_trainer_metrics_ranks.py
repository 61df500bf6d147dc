"""The trainer-metric audit on two gloo ranks: SkyRL's mean of per-rank means flagged on uneven shards only."""

from __future__ import annotations

from pathlib import Path

import pytest

from dist_helpers import run_ranks

pytestmark = pytest.mark.slow
WORKER = Path(__file__).with_name("trainer_metrics_worker.py")


@pytest.mark.parametrize("scenario", ["uneven", "equal"])
def test_skyrl_per_rank_means(scenario, tmp_path):
    """SkyRL #1822: 1 token at 1.0 and 100 at 2.0 log 1.5, the exact 201/101; equal shards agree, no warning."""
    ranks = run_ranks(scenario, tmp_path, worker=WORKER, timeout=120)
    for result in ranks:
        (row,) = result["rows"]
        assert row["key"] == "policy_entropy"
        if scenario == "uneven":
            assert row["trainer"] == pytest.approx(1.5) and row["exact"] == pytest.approx(201 / 101)
            assert row["cause"] == "per_rank_means" and result["mismatched"] == 1
            (v,) = result["violations"]
            assert v["invariant"] == "trainer_metric" and v["severity"] == "warning"
            assert "mean of per-rank means" in v["message"] and "policy_entropy = 1.5" in v["message"]
            assert f"{201 / 101:.6g}" in v["message"]
        else:
            assert row["trainer"] == pytest.approx(1.5) and row["exact"] == pytest.approx(1.5)
            assert row["cause"] is None and result["violations"] == [] and result["mismatched"] == 0
