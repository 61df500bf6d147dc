"""Bounded resources: the per-question history and tables are capped, and their per-step cost does not scan the
whole history."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.run.history import QuestionHistory


def _records(history: QuestionHistory) -> list[dict]:
    """The history's records, least recently seen first, read from its public state."""
    names = ("question_id", "times_seen", "times_filtered", "success_sum", "response_count", "last_reward_std",
             "stuck_streak")
    return [dict(zip(names, row, strict=False)) for row in history.state_dict()["questions"]]


def _reference_table(history: QuestionHistory, limit):
    """The table order by definition: most-filtered first, ties most recently seen first (a plain sort)."""
    items = _records(history)
    order = sorted(range(len(items)), key=lambda i: (-items[i]["times_filtered"], -i))
    return [items[i]["question_id"] for i in (order if limit is None else order[:limit])]


def _reference_stuck(history: QuestionHistory):
    """Stuck questions by definition: a full scan of the records."""
    return [r["question_id"] for r in _records(history) if r["stuck_streak"] >= history.stuck_after]


@settings(max_examples=60, deadline=None, database=None)
@given(
    cap=st.integers(1, 12), stuck_after=st.integers(1, 3), seed=st.integers(0, 2**16),
    steps=st.integers(1, 25), limit=st.one_of(st.none(), st.integers(0, 15)),
)
def test_incremental_stuck_set_and_table_match_their_definitions(cap, stuck_after, seed, steps, limit):
    """Through updates, evictions and a state round trip, stuck questions and the table equal full scans."""
    rng = np.random.default_rng(seed)
    history = QuestionHistory(cap, stuck_after)
    for step in range(steps):
        k = int(rng.integers(1, 8))
        questions = [f"q{i}" for i in rng.integers(0, 16, k)]
        history.update(step, questions, rng.integers(0, 5, k), np.full(k, 4), rng.random(k) < 0.7, rng.random(k))
        assert len(history) <= cap
        assert history.stuck_questions() == _reference_stuck(history)
        assert [r["question_id"] for r in history.table_rows(limit)] == _reference_table(history, limit)
    restored = QuestionHistory(1, 1)
    restored.load_state_dict(history.state_dict())
    assert restored.stuck_questions() == history.stuck_questions()


def test_monitor_history_and_table_are_capped():
    """Many more distinct questions than history_cap: the history holds cap questions, tables table_rows rows."""
    mon = GRPOMonitor(MonitorConfig(on_violation="ignore", strict=True, history_cap=50, table_every=5, table_rows=7))
    gen = torch.Generator().manual_seed(0)
    for step in range(40):
        rewards = (torch.rand(16, 4, generator=gen) < 0.5).float()
        mon.observe_rollout(rewards, question_ids=[f"s{step}-q{i}" for i in range(16)])
        report = mon.end_step()
        assert len(mon._run.questions.history) == min(16 * (step + 1), 50)
        if step % 5 == 0:
            assert len(report.tables["grpo/questions"]) == 7
    assert not mon._acc.rollouts  # the step state is reset each step
