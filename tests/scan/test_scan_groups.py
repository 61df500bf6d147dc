"""Rebuilding groups from recorded rows, checked against a plain dictionary grouping."""

from __future__ import annotations

import random

import numpy as np
import pytest

from grpo_monitor.tools.scan import ScanInputError, StepRows, build_groups
from grpo_monitor.tools.scan.groups import question_id, split_repeated
from grpo_monitor.tools.scan.tally import QuestionTally, common_prefix, common_suffix


def rows_of(keys, rewards, advantages=None, questions="same") -> StepRows:
    adv = np.asarray(advantages, dtype=float) if advantages is not None else None
    q = keys if questions == "same" else questions
    return StepRows(7, "7.jsonl", 1, np.asarray(rewards, dtype=float), keys, q, adv)


def as_groups(g) -> dict:
    """{question text: sorted rewards} of a StepGroups, whatever its layout."""
    r = g.rewards
    if g.group_ids is None:
        members = [sorted(row) for row in r.tolist()]
    else:
        members = [sorted(r[g.group_ids == k].tolist()) for k in range(g.num_groups)]
    return {t: m for t, m in zip(g.texts, members, strict=True)}


@pytest.mark.parametrize("sizes", [[4, 4, 4], [4, 3, 5]], ids=["equal-dense", "unequal-flat"])
def test_shuffled_rows_regroup_like_a_dictionary(sizes):
    """Shuffled rows regroup by key: dense (B, G) when sizes are equal, flat with ids otherwise."""
    rng = random.Random(1)
    rows = [(f"q{k}", float(rng.random() < 0.5)) for k, n in enumerate(sizes) for _ in range(n)]
    rng.shuffle(rows)
    keys, rewards = map(list, zip(*rows, strict=True))
    g = build_groups(rows_of(keys, rewards), None)
    expected: dict = {}
    for k, r in rows:
        expected.setdefault(k, []).append(r)
    assert as_groups(g) == {k: sorted(v) for k, v in expected.items()}
    assert (g.group_ids is None) == (len(set(sizes)) == 1)
    assert g.texts == list(dict.fromkeys(keys))  # groups in order of first appearance
    assert g.question_ids == [question_id(k) for k in g.texts]


def test_advantages_follow_their_rows():
    """Advantages are reordered with the rewards (row i keeps its own advantage)."""
    keys = ["b", "a", "b", "a"]
    g = build_groups(rows_of(keys, [1.0, 2.0, 3.0, 4.0], advantages=[10.0, 20.0, 30.0, 40.0]), None)
    assert (g.advantages - 10 * g.rewards == 0).all()


def test_a_prompt_drawn_twice_is_cut_into_groups_of_g_in_row_order():
    """With G=2, four rows of one prompt become two groups (rows 1-2 and 3-4); a 3-row key stays whole."""
    g = build_groups(rows_of(["p", "p", "q", "p", "p", "r", "r", "r"], [1, 1, 0, 0, 1, 5, 5, 5]), 2)
    assert g.split_groups == 1 and g.num_groups == 4
    members = sorted(tuple(g.rewards[g.group_ids == k].tolist()) for k in range(g.num_groups))
    assert members == [(0.0,), (0.0, 1.0), (1.0, 1.0), (5.0, 5.0, 5.0)]
    new, parent = split_repeated(np.array([0, 0, 0, 0]), 2)
    assert new.tolist() == [0, 0, 1, 1] and parent.tolist() == [0, 0]


def test_consecutive_rows_without_a_group_column():
    """No group key: each G consecutive rows are a group; a count that is not a multiple of G is worded."""
    g = build_groups(StepRows(3, "x.jsonl", 5, np.arange(6.0), None, None, None), 3)
    assert g.rewards.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] and g.question_ids is None
    with pytest.raises(ScanInputError, match=r"x\.jsonl, line 5: step 3 has 6 rows, not a multiple of --group-size 4"):
        build_groups(StepRows(3, "x.jsonl", 5, np.arange(6.0), None, None, None), 4)
    with pytest.raises(ScanInputError, match="carry no group column; pass --group-size"):
        build_groups(StepRows(3, "x.jsonl", 5, np.arange(6.0), None, None, None), None)


def test_chat_message_prompts_group_by_their_text():
    """Unhashable prompts (lists of messages) group by their JSON text."""
    a = [{"role": "user", "content": "hi"}]
    b = [{"role": "user", "content": "yo"}]
    g = build_groups(rows_of([a, b, a, b], [1, 0, 1, 1]), None)
    assert g.num_groups == 2 and g.rewards.tolist() == [[1.0, 1.0], [0.0, 1.0]]


def test_tally_flags_stuck_saturated_and_constant_questions_with_their_core_text():
    """Always 0 is stuck, always 1 saturated, always 0.5 constant; the shared template is cut from the text."""
    tally = QuestionTally()
    template = "system\nanswer briefly.\nuser\n{}\nThink step by step."
    for step in range(3):
        rows = {"never?": [0, 0], "always?": [1, 1], "half?": [0.5, 0.5], f"mixed {step}?": [0, 1]}
        keys = [template.format(k) for k, v in rows.items() for _ in v]
        tally.update(build_groups(StepRows(step, "s", 1, np.array([x for v in rows.values() for x in v], float),
                                           keys, keys, None), None))
    kinds = {f.text: (f.kind, f.groups) for f in tally.flagged()}
    assert kinds == {"never?": ("stuck", 3), "always?": ("saturated", 3), "half?": ("constant", 3)}
    assert tally.counts() == {"questions": 6, "stuck": 1, "saturated": 1, "constant": 1}
    assert common_prefix("abcd", "abxy") == "ab" and common_suffix("xxcd", "yycd") == "cd"


def test_tally_memory_is_capped():
    """At most ``cap`` questions are kept (least recently seen dropped), with their texts."""
    tally = QuestionTally(cap=5)
    for step in range(20):
        keys = [f"q{step}"] * 2
        tally.update(build_groups(StepRows(step, "s", 1, np.zeros(2), keys, keys, None), None))
    assert len(tally.records) == 5 and len(tally.texts) == 5
    assert [tally.texts[q] for q in tally.records] == [f"q{s}" for s in range(15, 20)]
