"""grpo_monitor.run.history: the intra-group correlation estimator and the bounded question history."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from grpo_monitor.run.history import QuestionHistory, intra_group_correlation
from grpo_monitor.run.questions import iid_degenerate_rate

# ------------------------------------------------------------- overdispersion (ICC)


def _reference_icc(successes, counts):
    """Textbook one-way ANOVA on the expanded 0/1 observations, in plain Python (loops over responses)."""
    groups = [[1] * int(y) + [0] * int(n - y) for y, n in zip(successes, counts, strict=True) if n > 0]
    k, N = len(groups), sum(len(g) for g in groups)
    grand = Fraction(sum(map(sum, groups)), N)
    means = [Fraction(sum(g), len(g)) for g in groups]
    ssb = sum(len(g) * (m - grand) ** 2 for g, m in zip(groups, means, strict=True))
    ssw = sum((x - m) ** 2 for g, m in zip(groups, means, strict=True) for x in g)
    msb, msw = ssb / (k - 1), ssw / (N - k)
    n0 = (N - Fraction(sum(len(g) ** 2 for g in groups), N)) / (k - 1)
    return float((msb - msw) / (msb + (n0 - 1) * msw))


def _fisher_se(rho, n, k):
    """Large-sample standard error of the ANOVA ICC for k groups of equal size n (Fisher)."""
    return math.sqrt(2 * (1 - rho) ** 2 * (1 + (n - 1) * rho) ** 2 / (n * (n - 1) * (k - 1)))


def test_icc_matches_textbook_anova():
    """The vectorised estimator equals a response-level ANOVA on unequal groups (empty ones ignored)."""
    rng = np.random.default_rng(1)
    for _ in range(20):
        counts = rng.integers(0, 9, size=12)
        successes = rng.binomial(counts, rng.uniform(0.1, 0.9, size=12))
        expected = _reference_icc(successes.tolist(), counts.tolist())
        assert intra_group_correlation(successes, counts) == pytest.approx(expected, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("G", [4, 8, 16])
def test_icc_is_zero_for_iid_groups(G):
    """Independent Bernoulli rollouts give an estimate within sampling error of 0."""
    rng = np.random.default_rng(G)
    k = 4000
    successes = rng.binomial(G, 0.3, size=k)
    assert abs(intra_group_correlation(successes, np.full(k, G))) < 4 * _fisher_se(0.0, G, k)


@pytest.mark.parametrize("rho", [0.05, 0.2, 0.5])
@pytest.mark.parametrize("G", [4, 8, 16])
def test_icc_recovers_beta_binomial_rho(rho, G):
    """Beta-binomial groups with intra-class correlation rho give an estimate within sampling error of rho."""
    rng = np.random.default_rng(int(rho * 100) + G)
    k, p, concentration = 4000, 0.3, 1 / rho - 1
    q = rng.beta(p * concentration, (1 - p) * concentration, size=k)
    successes = rng.binomial(G, q)
    assert intra_group_correlation(successes, np.full(k, G)) == pytest.approx(rho, abs=4 * _fisher_se(rho, G, k))


def test_icc_edges():
    """Perfect separation gives 1, identical mixed groups -1/(n-1), and no variation or one group NaN."""
    assert intra_group_correlation(np.array([0, 8, 8, 0]), np.full(4, 8)) == 1.0
    assert intra_group_correlation(np.array([4, 4, 4]), np.full(3, 8)) == pytest.approx(-1 / 7)
    assert math.isnan(intra_group_correlation(np.zeros(5), np.full(5, 8)))
    assert math.isnan(intra_group_correlation(np.array([3, 0]), np.array([8, 0])))
    with pytest.raises(ValueError, match=r"`successes` to lie in \[0, counts\]"):
        intra_group_correlation(np.array([9]), np.array([8]))
    with pytest.raises(ValueError, match=r"successes has shape \(2,\) but counts has shape \(3,\)"):
        intra_group_correlation(np.array([1, 2]), np.array([4, 4, 4]))


# ------------------------------------------------------------------ question history


def _feed(history, step, ids, successes, counts, filtered, stds=None):
    n = len(ids)
    stds = np.zeros(n) if stds is None else np.asarray(stds, dtype=float)
    history.update(step, ids, np.asarray(successes), np.asarray(counts), np.asarray(filtered, dtype=bool), stds)


def test_pooled_counts_across_steps_and_repeats():
    """Groups of one question, in one step or across steps, pool into sums and counts."""
    h = QuestionHistory(cap=10, stuck_after=2)
    _feed(h, 0, ["a", "b", "a"], [1, 4, 3], [4, 4, 4], [False, True, False], [0.43, 0.0, 0.43])
    _feed(h, 1, ["a"], [0], [3], [True], [0.0])
    assert h.success_rate("a") == pytest.approx(4 / 11)
    assert h.success_rate("b") == 1.0
    rows = {row["question_id"]: row for row in h.table_rows()}
    assert {k: rows["a"][k] for k in list(rows["a"])[:5]} == {"question_id": "a", "success_rate": pytest.approx(4 / 11),
                                                           "reward_std": 0.0, "times_seen": 3, "times_filtered": 1}
    assert rows["b"]["times_filtered"] == 1 and len(h) == 2
    with pytest.raises(KeyError, match="question 'zzz' has no history"):
        h.success_rate("zzz")


def test_stuck_streak():
    """A question is stuck after `stuck_after` appearances filtered every time; one kept group resets it."""
    h = QuestionHistory(cap=10, stuck_after=3)
    for step in range(3):
        _feed(h, step, ["x", "y"], [0, 0], [4, 4], [True, True])
        _feed(h, step, ["z"], [8], [8], [True])
    assert sorted(h.stuck_questions()) == ["x", "y", "z"]
    _feed(h, 3, ["x", "x"], [0, 2], [4, 4], [True, False])  # one attempt kept: not stuck
    _feed(h, 3, ["y"], [0], [4], [True])
    _feed(h, 3, ["y"], [1], [4], [False])  # a later batch of the same step keeps a group
    _feed(h, 5, ["w"], [0], [4], [True])  # steps without z neither extend nor break its streak
    assert h.stuck_questions() == ["z"]


def test_least_recently_seen_eviction():
    """Beyond `cap` questions the least recently seen one goes; a returning question starts afresh."""
    h = QuestionHistory(cap=2, stuck_after=1)
    _feed(h, 0, ["a", "b"], [1, 1], [4, 4], [False, False])
    _feed(h, 1, ["a"], [2], [4], [False])
    _feed(h, 2, ["c"], [3], [4], [False])
    assert "b" not in h and "a" in h and "c" in h and len(h) == 2
    _feed(h, 3, ["b"], [0], [4], [True])
    assert "a" not in h and h.success_rate("b") == 0.0
    assert next(r for r in h.table_rows() if r["question_id"] == "b")["times_seen"] == 1


def test_table_rows_order_and_limit():
    """Rows come most-filtered first, ties most recently seen first, cut at `limit`."""
    h = QuestionHistory(cap=10, stuck_after=1)
    _feed(h, 0, ["a", "b", "c", "d"], [0, 0, 1, 2], [4, 4, 4, 4], [True, True, False, False])
    _feed(h, 1, ["b", "d"], [0, 1], [4, 4], [True, False])
    assert [r["question_id"] for r in h.table_rows()] == ["b", "a", "d", "c"]
    assert [r["question_id"] for r in h.table_rows(limit=2)] == ["b", "a"]
    assert h.table_rows(limit=0) == []


def test_pooled_sums_per_question_nan_when_absent():
    """pooled() gives each entry its question's success sum, responses and groups; NaN for an unknown one."""
    h = QuestionHistory(cap=10, stuck_after=1)
    _feed(h, 0, ["a", "b", "a"], [1, 8, 2], [4, 8, 4], [False, True, False])
    pooled = h.pooled(["a", "unknown", "b", "a"])
    assert pooled.shape == (3, 4)
    np.testing.assert_array_equal(pooled[:, [0, 2, 3]], [[3, 8, 3], [8, 8, 8], [2, 1, 2]])
    assert np.isnan(pooled[:, 1]).all()


def test_iid_degenerate_rate_from_the_pooled_history():
    """The iid prediction is the mean of p^G + (1-p)^G over groups, unknown questions left out."""
    h = QuestionHistory(cap=10, stuck_after=1)
    _feed(h, 0, ["a", "b"], [3, 8], [8, 8], [False, True])
    pa, pb = Fraction(3, 8), Fraction(1)
    expected = (pa**4 + (1 - pa) ** 4 + pb**8 + (1 - pb) ** 8) / 2
    rate = iid_degenerate_rate(np.array([4.0, 8.0, 4.0]), h.pooled(["a", "b", "unknown"]))
    assert rate == pytest.approx(float(expected), rel=1e-12)
    assert iid_degenerate_rate(np.array([4.0]), h.pooled(["a"])) == pytest.approx(float(pa**4 + (1 - pa) ** 4),
                                                                                  rel=1e-12)
    assert math.isnan(iid_degenerate_rate(np.array([4.0]), h.pooled(["unknown"])))


def _filled_history():
    h = QuestionHistory(cap=4, stuck_after=2)
    rng = np.random.default_rng(3)
    ids = ["a", ("b", 1), 7, "d", ("e", "f")]
    for step in range(6):
        chosen = [ids[i] for i in rng.choice(len(ids), size=3)]
        successes = rng.integers(0, 5, size=3)
        _feed(h, step, chosen, successes, [4, 4, 4], successes % 4 == 0, successes / 8)
    return h


def _observe(h):
    return (len(h), h.table_rows(), h.stuck_questions(), h.state_dict())


@pytest.mark.parametrize("via", ["dict", "json", "torch"])
def test_state_round_trip(via, tmp_path):
    """A restored history equals the original, and further updates keep them equal."""
    original = _filled_history()
    state = original.state_dict()
    if via == "json":
        state = json.loads(json.dumps(state))
    elif via == "torch":
        torch.save(state, tmp_path / "history.pt")
        state = torch.load(tmp_path / "history.pt", weights_only=True)
    restored = QuestionHistory(cap=1, stuck_after=1)
    restored.load_state_dict(state)
    assert _observe(restored) == _observe(original)
    for h in (original, restored):
        _feed(h, 6, [("b", 1), "new"], [0, 2], [4, 4], [True, False])
    assert _observe(restored) == _observe(original)


def test_update_validation():
    """Misaligned, non-bool or out-of-order inputs are refused with worded errors."""
    h = QuestionHistory(cap=4, stuck_after=1)
    with pytest.raises(ValueError, match="counts has shape \\(1,\\) but question_ids has 2 entries"):
        h.update(0, ["a", "b"], np.array([1, 2]), np.array([4]), np.array([False, False]), np.zeros(2))
    with pytest.raises(ValueError, match="`filtered` to be a bool array"):
        h.update(0, ["a"], np.array([1]), np.array([4]), np.array([0]), np.zeros(1))
    _feed(h, 5, ["a"], [1], [4], [False])
    with pytest.raises(ValueError, match="`step` to be >= the last step 5 but got 4"):
        _feed(h, 4, ["a"], [1], [4], [False])
    with pytest.raises(ValueError, match="`cap` to be an int >= 1 but got 0"):
        QuestionHistory(cap=0, stuck_after=1)


@pytest.mark.parametrize("halflife,gap", [(10.0, 5), (2.0, 1), (3.0, 7)], ids=["h10-gap5", "h2-gap1", "h3-gap7"])
def test_halflife_weighs_older_steps_down(halflife, gap):
    """With a half-life, a question's recent sums are older sums times 0.5**(steps/halflife) plus the new ones."""
    h = QuestionHistory(cap=10, stuck_after=3, halflife=halflife)
    one = lambda y, n: (np.array([y]), np.array([n]), np.array([False]), np.array([0.5]))  # noqa: E731
    h.update(0, ["q"], *one(6.0, 8))
    h.update(gap, ["q"], *one(1.0, 8))
    record = h.state_dict()["questions"][0]
    names = ["qid", "times_seen", "times_filtered", "success_sum", "response_count", "last_reward_std",
             "stuck_streak", "last_step", "recent_success", "recent_count", "recent_groups"]
    fields = dict(zip(names, record, strict=False))
    w = 0.5 ** (gap / halflife)
    assert fields["success_sum"] == 7.0 and fields["response_count"] == 16
    assert fields["recent_success"] == pytest.approx(6.0 * w + 1.0, rel=1e-12)
    assert fields["recent_count"] == pytest.approx(8 * w + 8, rel=1e-12)
    np.testing.assert_allclose(h.pooled(["q"])[:, 0], [6.0 * w + 1.0, 8 * w + 8, w + 1], rtol=1e-12)  # recent sums
    restored = QuestionHistory(cap=1, stuck_after=1)
    restored.load_state_dict(h.state_dict())
    assert restored.halflife == halflife
