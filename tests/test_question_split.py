"""The per-question history keeps the degenerate split (all unsolved, all solved, other) and truncation.

Checked against a plain-Python reference that walks every row of every step: a group is
degenerate when its scorable rewards take at most one value, unsolved when that value is the
batch's lowest reward, solved when it is the highest (a batch of one value: unsolved at <= 0),
other otherwise (or with no scorable row); truncation counts every row of the group.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from grpo_monitor import GRPOMonitor, MonitorConfig

G = 4
QUESTIONS = ["q0", "q1", "q2", "q3", "q4", "q5"]


def batches(seed: int, steps: int = 6, groups: int = 8):
    """Random steps: rewards in {0, 0.5, 1} with unscorable rows, repeated questions, truncation on most steps."""
    rng = np.random.default_rng(seed)
    out = []
    for step in range(steps):
        p = rng.uniform(0.05, 0.95, groups)[:, None]
        rewards = np.where(rng.random((groups, G)) < p, 1.0, 0.0)
        rewards[rng.random((groups, G)) < 0.1] = 0.5
        rewards[rng.random((groups, G)) < 0.08] = np.nan
        rewards[0] = 1.0 if step % 2 else 0.0  # always one degenerate group
        rewards[1] = np.nan if step == 2 else 0.5  # a constant middle value, or no scorable row
        questions = [QUESTIONS[i] for i in rng.integers(0, len(QUESTIONS), groups)]
        cut = rng.random((groups, G)) < 0.4 if step != 3 else None  # step 3 gives no truncation
        if cut is not None:
            cut[0] = True
        out.append((rewards, questions, cut))
    return out


def reference(steps) -> dict[str, dict[str, float]]:
    """Per question: the degenerate groups by kind, truncated rows over rows given, degenerate groups all cut."""
    acc: dict[str, dict[str, float]] = {}
    for rewards, questions, cut in steps:
        lo, hi = np.nanmin(rewards), np.nanmax(rewards)
        for b, q in enumerate(questions):
            r = acc.setdefault(q, dict(low=0, high=0, other=0, cut=0, given=0, degenerate_cut=0))
            values = sorted({float(x) for x in rewards[b] if not math.isnan(x)})
            degenerate = len(values) <= 1
            if degenerate:
                if not values:
                    kind = "other"
                elif lo == hi:
                    kind = "low" if values[0] <= 0 else "high"
                else:
                    kind = "low" if values[0] == lo else "high" if values[0] == hi else "other"
                r[kind] += 1
            if cut is not None:
                r["cut"] += int(cut[b].sum())
                r["given"] += G
                r["degenerate_cut"] += int(degenerate and cut[b].all())
    return acc


def run(mon: GRPOMonitor, steps, first: int = 0):
    report = None
    for i, (rewards, questions, cut) in enumerate(steps):
        mon.observe_rollout(rewards, question_ids=questions, truncated=cut)
        report = mon.end_step(step=first + i)
    return {row["question_id"]: row for row in report.tables["grpo/questions"]}


def config() -> MonitorConfig:
    return MonitorConfig(group_size=G, table_every=1, table_rows=100, on_violation="warn")


def assert_matches(table, ref):
    assert sorted(table) == sorted(ref)
    for q, r in ref.items():
        row = table[q]
        got = (row["degenerate_low"], row["degenerate_high"], row["degenerate_other"])
        assert got == (r["low"], r["high"], r["other"]), q
        if r["given"]:
            assert row["truncated_rate"] == pytest.approx(r["cut"] / r["given"], rel=1e-12), q
            assert row["degenerate_truncated"] == r["degenerate_cut"], q
        else:
            assert "truncated_rate" not in row and "degenerate_truncated" not in row, q


@pytest.mark.parametrize("seed", [0, 1, 2], ids=["seed0", "seed1", "seed2"])
def test_table_matches_a_row_by_row_reference(seed):
    """grpo/questions carries each question's all-low, all-high and other degenerate groups and its truncation."""
    steps = batches(seed)
    table = run(GRPOMonitor(config()), steps)
    assert_matches(table, reference(steps))
    assert any(r["degenerate_low"] for r in table.values()) and any(r["degenerate_high"] for r in table.values())
    assert any(r["degenerate_other"] for r in table.values())


def test_split_adds_up_to_the_step_metrics():
    """Per step, the history's new counts by kind, summed over questions, are the step's split rates x groups."""
    steps = batches(5, steps=1)
    mon = GRPOMonitor(config())
    rewards, questions, cut = steps[0]
    mon.observe_rollout(rewards, question_ids=questions, truncated=cut)
    report = mon.end_step(step=0)
    table = report.tables["grpo/questions"]
    groups = len(questions)
    for kind in ("low", "high", "other"):
        total = sum(row[f"degenerate_{kind}"] for row in table)
        assert total == pytest.approx(report.metrics[f"grpo/groups/degenerate_{kind}_rate"] * groups, abs=1e-9)
    assert sum(row.get("degenerate_truncated", 0) for row in table) == pytest.approx(
        report.metrics["grpo/groups/degenerate_truncated_rate"] * groups, abs=1e-9)


def test_split_survives_a_resume():
    """state_dict (through JSON) then load_state_dict mid-run: the table equals the uninterrupted run's."""
    steps = batches(3)
    whole = run(GRPOMonitor(config()), steps)
    first = GRPOMonitor(config())
    run(first, steps[:3])
    state = json.loads(json.dumps(first.state_dict()))
    resumed = GRPOMonitor(config())
    resumed.load_state_dict(state)
    table = run(resumed, steps[3:], first=3)
    assert_matches(table, reference(steps))
    assert json.dumps(table, sort_keys=True, default=str) == json.dumps(whole, sort_keys=True, default=str)


def test_a_state_saved_before_the_split_loads():
    """A history saved before the split existed (records without its fields) loads; its counts start at 0."""
    mon = GRPOMonitor(config())
    run(mon, batches(4, steps=2))
    state = json.loads(json.dumps(mon.state_dict()))
    state["questions"]["questions"] = [row[:11] for row in state["questions"]["questions"]]
    fresh = GRPOMonitor(config())
    fresh.load_state_dict(state)
    table = {r["question_id"]: r for r in fresh._run.questions.table(100)}
    assert all(r["degenerate_low"] == 0 and "truncated_rate" not in r for r in table.values())
