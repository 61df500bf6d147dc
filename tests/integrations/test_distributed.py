"""torch.distributed with 2 gloo processes on CPU: one collective per sync, the union's metrics, breaches everywhere.

All scenarios run in one launch of two processes (``dist_worker.py``), one after the other
in the same process group; a hung collective fails the launch at the timeout.
"""

from __future__ import annotations

import math

import pytest
import torch

from dist_helpers import run_ranks
from dist_worker import (
    GROUPS_PER_RANK,
    WORLD_SIZE_DEFAULT,
    G,
    has_tokens,
    observe,
    observe_weights,
    per_group_view,
    shard,
    union,
    union_questions,
)
from grpo_monitor import GRPOMonitor, MonitorConfig

CLEAN = ("late_init", "local_shards", "global", "empty_shard", "tokens_rank0", "questions")
BREACHES = ("eager_breach", "deferred_breach", "token_breach")


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    """Every scenario on 2 ranks: (per-rank results keyed by scenario, output folder)."""
    outdir = tmp_path_factory.mktemp("dist")
    return run_ranks(",".join(CLEAN + BREACHES + ("weights", "weights_global")), outdir, timeout=120), outdir


def single_process_reports(scenario: str) -> list:
    """The reference: ONE process observing the concatenation of every rank's shard."""
    extra = dict(table_every=1, stuck_after=1) if scenario == "questions" else {}
    mon = GRPOMonitor(MonitorConfig(group_size=4, std_convention="population", strict=True, **extra))
    out = []
    for step in range(2):
        data = union(step, WORLD_SIZE_DEFAULT)
        if scenario == "empty_shard" and step == 1:  # rank 1 had nothing
            data = {k: v[: len(v) // 2] for k, v in data.items()}
        if scenario == "tokens_rank0":  # only rank 0 (the first half) observed token tensors
            observe(mon, data, tokens=False)
            half = {k: v[: len(v) // 2] for k, v in data.items()}
            mon.observe_loss(mask=half["mask"], advantages=half["token_adv"], logprobs=half["logprobs"],
                             ref_logprobs=half["ref_logprobs"], old_logprobs=half["old_logprobs"])
        else:
            qs = union_questions(step, WORLD_SIZE_DEFAULT) if scenario == "questions" else None
            observe(mon, data, has_tokens(), qs)
        out.append(mon.end_step())
    return out


def single_process_metrics(scenario: str) -> list[dict[str, float]]:
    return [r.metrics for r in single_process_reports(scenario)]


def assert_same_metrics(got: dict[str, float], want: dict[str, float]) -> None:
    assert set(got) == set(want), f"keys differ: {sorted(set(got) ^ set(want))}"
    for key, value in want.items():
        g = got[key]
        assert (math.isnan(g) and math.isnan(value)) or g == pytest.approx(value, rel=1e-9, abs=1e-12), key


@pytest.mark.parametrize("scenario", CLEAN)
def test_every_rank_gets_the_union_metrics(scenario, launch):
    """Each rank's report equals one process's report on the union (global scope: the same data, not doubled)."""
    results, _ = launch
    want = single_process_metrics(scenario)
    for rank, res in enumerate(results):
        got = res[scenario]
        assert got["raised"] is None, f"rank {rank} raised {got['raised']}"
        assert len(got["metrics"]) == 2
        for step_metrics, ref in zip(got["metrics"], want, strict=True):
            assert_same_metrics(step_metrics, ref)


@pytest.mark.parametrize("scenario", ["weights", "weights_global"])
def test_weights_shares_are_over_every_ranks_rows(scenario, launch):
    """Each rank's own token-mean loss: every rank reports the grpo/weights/ shares one process computes from the
    ranks' shards as two micro-batches (each loss halved, as DDP's gradient average does), the check quiet; its
    groups kept apart from the other rank's (local scope) or the same gathered groups (global scope)."""
    results, _ = launch
    mon = GRPOMonitor(MonitorConfig(group_size=G, std_convention="population", strict=True,
                                    loss_aggregation="token_mean"))
    want = []
    for step in range(2):
        data = union(step, WORLD_SIZE_DEFAULT)
        mon.observe_rollout(data["rewards"], advantages=data["advantages"])
        b = GROUPS_PER_RANK * G
        for r in range(WORLD_SIZE_DEFAULT):
            rows = torch.arange(b) + r * b
            observe_weights(mon, shard(step, r, WORLD_SIZE_DEFAULT), rows=rows, share=1 / WORLD_SIZE_DEFAULT)
        want.append({k: v for k, v in mon.end_step().metrics.items() if k.startswith("grpo/weights/")})
    assert "grpo/weights/degenerate_share" in want[0] and "grpo/weights/effective_questions" in want[0]
    for rank, res in enumerate(results):
        got = res[scenario]
        assert got["raised"] is None, f"rank {rank} raised {got['raised']}"
        for step_metrics, ref in zip(got["metrics"], want, strict=True):
            assert_same_metrics({k: v for k, v in step_metrics.items() if k.startswith("grpo/weights/")}, ref)


@pytest.mark.parametrize("scenario", ["local_shards", "questions"])
def test_every_rank_gets_the_union_per_question_view(scenario, launch):
    """Shards with question ids: the history, histograms, stuck questions and table are the union's on every rank."""
    results, _ = launch
    want = [per_group_view(r) for r in single_process_reports(scenario)]
    if scenario == "questions":
        assert "grpo/groups/degenerate_rate_iid" in results[0][scenario]["metrics"][1]
        assert want[1]["tables"]["grpo/questions"], "the reference has a per-question table"
    for rank, res in enumerate(results):
        for step, (got, ref) in enumerate(zip(res[scenario]["per_group"], want, strict=True)):
            assert got["flagged"] == ref["flagged"], (rank, step)
            assert got["tables"] == ref["tables"], (rank, step)
            assert set(got["histograms"]) == set(ref["histograms"]), (rank, step)
            for key, values in ref["histograms"].items():
                assert got["histograms"][key] == pytest.approx(values, rel=1e-12, abs=1e-12, nan_ok=True), (rank, step,
                                                                                                            key)


@pytest.mark.parametrize("scenario", CLEAN)
def test_only_rank_zero_writes_to_sinks(scenario, launch):
    """Rank 0's JSONL sink gets one line per step; rank 1's sink is never opened (a monitor built early too)."""
    _, outdir = launch
    assert len((outdir / f"{scenario}-rank0.jsonl").read_text().splitlines()) == 2
    assert not (outdir / f"{scenario}-rank1.jsonl").exists()


@pytest.mark.parametrize(
    "scenario, invariant",
    [
        pytest.param("eager_breach", "zero_group_mean", id="eager-rollout-check"),
        pytest.param("deferred_breach", "zero_group_mean", id="deferred-to-end-step"),
        pytest.param("token_breach", "token_constant_advantage", id="token-statistics"),
    ],
)
def test_a_breach_on_one_rank_stops_both(scenario, invariant, launch):
    """A breach in rank 1's data only raises InvariantViolation on both ranks (no rank left in a collective)."""
    results, _ = launch
    for rank, res in enumerate(results):
        got = res[scenario]
        assert got["raised"] is not None and invariant in got["raised"], f"rank {rank}: {got['raised']}"
        assert len(got["metrics"]) == 1, "step 0 is clean, step 1 raises"
