"""Resume: a monitor restored from ``state_dict()`` continues exactly as the uninterrupted run."""

from __future__ import annotations

import json
import math

import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from references import advantages

STEPS, CHECKPOINT, SWITCH = 14, 6, 6  # the convention changes right at the resume: only the state can tell
G, GROUPS, POOL = 8, 12, 30


def _config() -> MonitorConfig:
    return MonitorConfig(
        on_violation="ignore", strict=True, history_cap=20, stuck_after=2, table_every=3, table_rows=50
    )


def _batch(step: int):
    """Deterministic data of one step: a generated batch, the live groups retained, their advantages."""
    gen = torch.Generator().manual_seed(1000 + step)
    questions = [f"q{i}" for i in torch.randint(POOL, (GROUPS,), generator=gen).tolist()]
    p = torch.rand(GROUPS, 1, generator=gen) ** 2
    rewards = (torch.rand(GROUPS, G, generator=gen) < p).double()
    keep = (rewards.std(1) > 0).nonzero().flatten()
    kept = rewards[keep]
    adv = advantages(kept, "bessel" if step >= SWITCH else "population", 1e-6)
    if step == 3:
        adv[0, 0] = math.nan  # a `finite` breach before the checkpoint: its count must survive the resume
    return rewards, questions, kept, adv, [questions[i] for i in keep.tolist()]


def _train(mon: GRPOMonitor, steps: range) -> list:
    reports = []
    for step in steps:
        rewards, questions, kept, adv, kept_questions = _batch(step)
        mon.observe_generation(rewards, question_ids=questions, lengths=torch.full(rewards.shape, 7 + step))
        mon.observe_rollout(kept, advantages=adv, question_ids=kept_questions)
        reports.append(mon.end_step())
    return reports


def _assert_same_reports(resumed: list, uninterrupted: list, same) -> None:
    assert len(resumed) == len(uninterrupted)
    for r, u in zip(resumed, uninterrupted, strict=True):
        assert r.step == u.step
        assert r.metrics.keys() == u.metrics.keys(), (r.step, r.metrics.keys() ^ u.metrics.keys())
        for key in u.metrics:
            assert same(r.metrics[key], u.metrics[key]), (r.step, key, r.metrics[key], u.metrics[key])
        assert same(r.tables, u.tables) and same(r.histograms, u.histograms)
        assert r.flagged_questions == u.flagged_questions and r.convention == u.convention
        assert [v.to_dict() for v in r.violations] == [v.to_dict() for v in u.violations]


@pytest.fixture(scope="module")
def uninterrupted():
    mon = GRPOMonitor(_config())
    return _train(mon, range(STEPS)), mon


def test_the_scenario_exercises_every_part_of_the_state(uninterrupted):
    """The uninterrupted run has history eviction, stuck questions, ledger totals, a breach and a convention change."""
    reports, mon = uninterrupted
    assert any(r.flagged_questions for r in reports[CHECKPOINT:])
    assert "finite" in [v.invariant for v in reports[3].violations]
    assert "convention" in [v.invariant for v in reports[SWITCH].violations]
    assert len(mon._run.questions.history) == 20  # capped: POOL=30 questions were seen
    totals = sum(r.metrics["grpo/sampling/generated_groups"] for r in reports)
    assert reports[-1].metrics["grpo/sampling/total_generated_groups"] == totals == GROUPS * STEPS
    retained = sum(r.metrics["grpo/groups/total"] for r in reports)
    assert reports[-1].metrics["grpo/sampling/total_retained_groups"] == retained


@pytest.mark.parametrize("via", ["torch-file", "json"])
def test_resumed_run_matches_the_uninterrupted_one(via, uninterrupted, tmp_path, same):
    """Checkpoint at step 6, new monitor, load, continue: every metric, table and breach of steps 6-13 is identical."""
    expected, full = uninterrupted
    first = GRPOMonitor(_config())
    _train(first, range(CHECKPOINT))
    if via == "torch-file":
        torch.save({"monitor": first.state_dict()}, tmp_path / "ckpt.pt")
        state = torch.load(tmp_path / "ckpt.pt", weights_only=True)["monitor"]
    else:
        state = json.loads(json.dumps(first.state_dict()))
    del first
    resumed = GRPOMonitor(_config())
    resumed.load_state_dict(state)
    assert resumed.step == CHECKPOINT
    _assert_same_reports(_train(resumed, range(CHECKPOINT, STEPS)), expected[CHECKPOINT:], same)
    assert resumed.violation_counts == full.violation_counts
    assert same(resumed.state_dict(), full.state_dict())


def test_without_the_state_the_continuation_differs(uninterrupted):
    """Control: a fresh monitor on the same later data misses the convention change, the totals and the history."""
    expected, _ = uninterrupted
    fresh = GRPOMonitor(_config())
    fresh.step = CHECKPOINT
    reports = _train(fresh, range(CHECKPOINT, STEPS))
    switch = SWITCH - CHECKPOINT
    assert "convention" not in [v.invariant for v in reports[switch].violations]
    total = "grpo/sampling/total_generated_groups"
    assert reports[-1].metrics[total] != expected[-1].metrics[total]
    assert fresh.violation_counts.get("finite", 0) == 0


def test_state_dict_names_its_parts():
    """The state carries the step counter, locked convention, question history, violation counts and ledger totals."""
    mon = GRPOMonitor(_config())
    _train(mon, range(4))
    state = mon.state_dict()
    assert state["step"] == 4
    assert state["conventions"]["candidates"]
    assert len(state["questions"]["questions"]) > 0
    assert state["counts"] == {"finite": 1}
    assert state["totals"]["generated_groups"] == 4 * GROUPS
