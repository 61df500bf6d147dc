"""verl's own step metrics audited with verl's real functions: compute_data_metrics, agg_loss, Metric."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from verl import DataProto  # noqa: E402
from verl.trainer.ppo.core_algos import agg_loss  # noqa: E402
from verl.trainer.ppo.metric_utils import compute_data_metrics  # noqa: E402
from verl.utils.metric.utils import Metric, reduce_metrics  # noqa: E402

from grpo_monitor import GRPOMonitor, MonitorConfig  # noqa: E402
from grpo_monitor.integrations import verl as gverl  # noqa: E402

G, P, W, EOS = 4, 3, 8, 2


def _batch(cut_by_model_len: bool) -> tuple[DataProto, torch.Tensor, np.ndarray, torch.Tensor]:
    """Eight responses of width 8: EOS-ended, cut at the width, and (``cut_by_model_len``) cut at 5 by max_model_len."""
    lengths = torch.tensor([3, 8, 5, 6, 8, 4, 5, 7])
    ends_eos = torch.tensor([1, 0, 1, 1, 0, 1, 1, 1]).bool()
    if cut_by_model_len:
        ends_eos[[2, 6]] = False  # cut at 5 tokens by max_model_len: no EOS, shorter than the width
    b = len(lengths)
    g = torch.Generator().manual_seed(0)
    responses = torch.randint(3, 20, (b, W), generator=g)
    responses[torch.arange(b)[ends_eos], lengths[ends_eos] - 1] = EOS
    mask = (torch.arange(W)[None, :] < lengths[:, None]).long()
    scores = torch.tensor([1.0, 0, 1, 1, 0, 0, 1, 0])
    uid = np.array([f"q{i // G}" for i in range(b)], dtype=object)
    adv_row = torch.cat([(s - s.mean()) / (s.std() + 1e-6) for s in scores.view(-1, G)])
    level = torch.zeros(b, W)
    level[torch.arange(b), lengths - 1] = scores
    tensors = {"prompts": torch.ones(b, P, dtype=torch.long), "responses": responses,
               "attention_mask": torch.cat([torch.ones(b, P, dtype=torch.long), mask], 1),
               "response_mask": mask, "token_level_scores": level, "token_level_rewards": level,
               "advantages": adv_row[:, None] * mask, "returns": adv_row[:, None] * mask}
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": uid}), scores, uid, ~ends_eos


@pytest.mark.parametrize("cut_by_model_len", [False, True], ids=["width-cap-only", "max_model_len-cap"])
def test_clip_ratio_that_misses_the_model_len_cap(cut_by_model_len):
    """verl #7823: rows cut by max_model_len end shorter than the width, compute_data_metrics misses them."""
    data, scores, uid, cut = _batch(cut_by_model_len)
    metrics = compute_data_metrics(data, use_critic=False)
    mon = GRPOMonitor(MonitorConfig(group_size=G, on_violation="warn"))
    lengths = data.batch["response_mask"].sum(-1)
    mon.observe_rollout(scores, group_ids=list(uid), lengths=lengths, truncated=cut)
    gverl.audit_data_metrics(mon, data, metrics, eos_token_ids=[EOS])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        report = mon.end_step()
    rows = {r["key"]: r for r in report.trainer_metrics}
    assert {"critic/score/mean", "critic/advantages/mean", "critic/advantages/max", "critic/advantages/min",
            "response_length/mean", "response_length/clip_ratio"} <= set(rows)
    assert rows["response_length/clip_ratio"]["exact"] == pytest.approx(float(cut.double().mean()))
    flagged = {k for k, r in rows.items() if r["cause"]}
    if cut_by_model_len:
        assert flagged == {"response_length/clip_ratio"}
        assert rows["response_length/clip_ratio"]["cause"] == "missed_cap"
        (v,) = [v for v in report.violations if v.invariant == "trainer_metric"]
        assert "max_model_len" in v.hint and "0.25" in v.observed and "0.5" in v.observed
    else:
        assert flagged == set() and report.violations == []


def _entropy_shards() -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Two data-parallel ranks, two micro-batches each: (entropy, mask)."""
    g = torch.Generator().manual_seed(1)
    return [[(torch.rand(2, 6, generator=g) * 3, (torch.rand(2, 6, generator=g) < 0.7).float()) for _ in range(2)]
            for _ in range(2)]


def _monitor_of(shards) -> GRPOMonitor:
    mon = GRPOMonitor(MonitorConfig(group_size=2, on_violation="warn"))
    for rank in shards:
        for entropy, mask in rank:
            mon.observe_loss(mask=mask, entropy=entropy)
    return mon


@pytest.mark.parametrize("reduction", ["aggregate_dp", "flattened_sum"])
def test_sum_metric_over_data_parallel_ranks(reduction):
    """verl #5203: a Metric(SUM) of agg_loss(token-mean, dp_size, batch_num_tokens) summed over every rank's
    values grows with the DP size; verl 0.9.1's Metric.aggregate_dp (mean over ranks) is the global token mean."""
    shards = _entropy_shards()
    total = int(sum(float(m.sum()) for rank in shards for _, m in rank))
    per_rank = []
    for rank in shards:
        metric = Metric("sum")
        for e, m in rank:
            metric.append(agg_loss(e, m, "token-mean", dp_size=2, batch_num_tokens=total))
        per_rank.append(metric)
    if reduction == "aggregate_dp":
        logged = float(Metric.aggregate_dp(per_rank))
    else:  # before #5203: every rank's values in one Metric, summed
        merged = Metric("sum")
        for m in per_rank:
            merged.extend(m)
        logged = float(merged.aggregate())
    mon = _monitor_of(shards)
    mon.audit_trainer_metrics("verl", {"actor/entropy_loss": logged}, world_size=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        (row,) = mon.end_step().trainer_metrics
    assert row["cause"] == (None if reduction == "aggregate_dp" else "dp_sum")
    if reduction == "flattened_sum":
        assert row["trainer"] == pytest.approx(2 * row["exact"])


@pytest.mark.parametrize("scaled_twice", [False, True], ids=["scaled-once", "scaled-twice"])
def test_metric_scaled_by_accumulation_steps(scaled_twice):
    """verl #4778/#4711: each micro-batch's entropy metric multiplied by loss_scale_factor = 1/micro-batches before
    reduce_metrics' mean logs the value divided by the number of micro-batches (dp_actor.py@cd4072d L533)."""
    rank = [(e, torch.ones_like(m)) for e, m in _entropy_shards()[0]]  # equal micro-batches: a mean of means is exact
    k = len(rank)
    values = [float(agg_loss(e, m, "token-mean")) * ((1 / k) if scaled_twice else 1.0) for e, m in rank]
    logged = float(reduce_metrics({"actor/entropy": values})["actor/entropy"])
    mon = _monitor_of([[(e, m) for e, m in rank]])
    mon.audit_trainer_metrics("verl", {"actor/entropy": logged}, accumulation_steps=k)
    exact_micro = [float((e.double() * m).sum() / m.sum()) for e, m in rank]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        (row,) = mon.end_step().trainer_metrics
    assert row["cause"] == ("accumulation_scaling" if scaled_twice else None)
    assert row["exact"] == pytest.approx(sum(exact_micro) / k, rel=1e-6)  # the monitor sums float32 tokens


class _Fit:
    """Where verl's RayPPOTrainer.fit stands: compute_advantage, then compute_data_metrics, its tokenizer in reach."""

    def __init__(self):
        from types import SimpleNamespace

        self.tokenizer = SimpleNamespace(eos_token_id=EOS)

    def step(self, data: DataProto) -> dict:
        from verl.trainer.ppo import ray_trainer

        data = ray_trainer.compute_advantage(data, adv_estimator="grpo")
        return ray_trainer.compute_data_metrics(batch=data, use_critic=False)


@pytest.mark.parametrize("cut_by_model_len", [False, True], ids=["width-cap-only", "max_model_len-cap"])
def test_attached_fit_audits_the_data_metrics(cut_by_model_len, tmp_path):
    """Under attach(), fit's compute_data_metrics is audited in the next step's report, labelled with its step."""
    from grpo_monitor.sinks import JSONLSink, read_jsonl

    gverl.attach(sinks=[JSONLSink(tmp_path / "m.jsonl")], config=MonitorConfig(on_violation="warn"))
    try:
        fit = _Fit()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for _ in range(3):
                data, *_ = _batch(cut_by_model_len)
                data.batch.pop("advantages")
                data.batch.pop("returns")
                fit.step(data)
    finally:
        gverl.detach()
    records = read_jsonl(tmp_path / "m.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2]
    assert "trainer_metrics" not in records[0]  # step 0's data metrics come after its report
    for record in records[1:]:
        rows = {r["key"]: r for r in record["trainer_metrics"]}
        assert {r["of_step"] for r in rows.values()} == {record["step"] - 1}
        assert {"critic/score/mean", "critic/advantages/mean", "response_length/mean",
                "response_length/clip_ratio"} <= set(rows)
        flagged = {k for k, r in rows.items() if r["cause"]}
        assert flagged == ({"response_length/clip_ratio"} if cut_by_model_len else set())
        messages = [v["message"] for v in record["violations"] if v["invariant"] == "trainer_metric"]
        if cut_by_model_len:
            (text,) = messages
            assert f"at step {record['step'] - 1}, verl logged response_length/clip_ratio = 0.25" in text
        else:
            assert messages == []
