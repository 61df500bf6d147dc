"""Issue 3, monitor side: the retry ledger against a simulated DAPO loop, and theory against observation."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from grpo_monitor.run.questions import conditional_overdispersion, filtered_flags
from grpo_monitor.tools import theory


@dataclasses.dataclass
class LoopCounts:
    """What the simulated loop itself counted in one step."""

    batches: int = 0
    groups: int = 0
    responses: int = 0
    degenerate: int = 0
    tokens: int = 0
    retained: int = 0


class DapoLoop:
    """DAPO-style dynamic sampling over K questions with fixed success probabilities.

    Each generation batch draws ``gen_batch`` questions (uniformly, or all K in order with
    ``every_question``) and G responses each; groups with reward variation are kept until
    ``B`` are retained (``truncate``: extras of the last batch are discarded, as verl does)
    or ``max_batches`` batches were generated (the retry cap). With ``rho > 0`` the
    responses of a group share a Beta-distributed success rate (intra-group correlation
    rho, mean p_q): beta-binomial rollouts.
    """

    def __init__(self, mon, p, G=8, B=16, gen_batch=32, max_batches=50, rho=0.0, truncate=True,
                 every_question=False, names=None, seed=0):
        self.mon, self.p, self.G, self.B = mon, np.asarray(p, dtype=float), G, B
        self.gen_batch, self.max_batches, self.rho, self.truncate = gen_batch, max_batches, rho, truncate
        self.every_question = every_question
        self.names = names or [f"q{i}" for i in range(len(self.p))]
        self.rng = np.random.default_rng(seed)

    def _generate(self):
        q = np.arange(len(self.p)) if self.every_question else self.rng.integers(0, len(self.p), self.gen_batch)
        p = self.p[q]
        if self.rho > 0:
            inner = (1 - self.rho) / self.rho
            p = self.rng.beta(np.maximum(p * inner, 1e-9), np.maximum((1 - p) * inner, 1e-9))
        rewards = (self.rng.random((len(q), self.G)) < p[:, None]).astype(float)
        lengths = self.rng.integers(10, 200, (len(q), self.G))
        return q, rewards, lengths

    def step(self):
        """One training step; returns (report, the loop's own counts)."""
        c = LoopCounts()
        kept_r, kept_q = [], []
        while len(kept_r) < self.B and c.batches < self.max_batches:
            q, rewards, lengths = self._generate()
            names = [self.names[i] for i in q]
            self.mon.observe_generation(rewards, question_ids=names, lengths=lengths)
            live = rewards.std(axis=1) > 0
            c.batches += 1
            c.groups += len(q)
            c.responses += rewards.size
            c.degenerate += int((~live).sum())
            c.tokens += int(lengths.sum())
            for i in np.flatnonzero(live):
                if self.truncate and len(kept_r) >= self.B:
                    break
                kept_r.append(rewards[i])
                kept_q.append(names[i])
        c.retained = len(kept_r)
        r = np.array(kept_r).reshape(-1, self.G)
        adv = (r - r.mean(1, keepdims=True)) / (r.std(1, keepdims=True) + 1e-4)
        self.mon.observe_rollout(r, advantages=adv, question_ids=kept_q)
        return self.mon.end_step(), c


# ------------------------------------------------------------------ exact counts


@pytest.mark.parametrize("max_batches", [50, 2], ids=["uncapped", "retry-cap-2"])
def test_ledger_counts_equal_the_loop_counts(make_monitor, max_batches):
    """Per step, every ledger count equals what the DAPO loop counted itself (discards and the cap included)."""
    loop = DapoLoop(make_monitor(), p=[0.02, 0.1, 0.5, 0.9, 0.97], G=8, B=16, gen_batch=8, max_batches=max_batches)
    for _ in range(6):
        report, c = loop.step()
        m = report.metrics
        assert m["grpo/sampling/generation_batches"] == c.batches
        assert m["grpo/sampling/generated_groups"] == c.groups
        assert m["grpo/sampling/generated_responses"] == c.responses
        assert m["grpo/sampling/retained_groups"] == c.retained == m["grpo/groups/total"]
        assert m["grpo/sampling/discarded_groups"] == c.groups - c.retained
        assert m["grpo/sampling/retention_rate"] == c.retained / c.groups
        assert m["grpo/sampling/responses_per_retained_group"] == c.responses / c.retained
        assert m["grpo/sampling/generated_degenerate_rate"] == c.degenerate / c.groups
        assert m["grpo/sampling/generated_tokens"] == c.tokens
        assert m["grpo/sampling/tokens_per_retained_group"] == c.tokens / c.retained
        assert report.violations == []
    if max_batches == 2:
        assert c.batches == 2


def test_no_lengths_means_no_token_metrics(make_monitor):
    """Generated tokens are reported only when lengths are given."""
    mon = make_monitor()
    mon.observe_generation(np.array([[1.0, 0.0], [1.0, 1.0]]))
    mon.observe_rollout(np.array([[1.0, 0.0]]), advantages=np.array([[1.0, -1.0]]))
    m = mon.end_step().metrics
    assert "grpo/sampling/generated_tokens" not in m
    assert m["grpo/sampling/retained_groups"] == 1 and m["grpo/sampling/discarded_groups"] == 1


# ------------------------------------------------------------- long-run theory


@pytest.mark.parametrize("p, seed_value", [(0.01, 103.5528), (0.1, 14.0466), (0.5, 8.0630)])
def test_responses_per_retained_group_converge_to_G_over_alpha(make_monitor, p, seed_value):
    """One question retried without a cap: responses per retained group tend to G / alpha (seed 000 table)."""
    G = 8
    expected = float(theory.expected_responses_per_retained_group(p, G))
    assert expected == pytest.approx(seed_value, abs=1e-4)
    loop = DapoLoop(make_monitor(), p=[p], G=G, B=32, gen_batch=64, max_batches=10**6, truncate=False)
    responses = retained = groups = 0
    for _ in range(40):
        report, c = loop.step()
        responses += report.metrics["grpo/sampling/generated_responses"]
        retained += report.metrics["grpo/sampling/retained_groups"]
        groups += c.groups
    alpha = float(theory.retention_probability(p, G))
    se = G / alpha**2 * math.sqrt(alpha * (1 - alpha) / groups)  # delta method on G / alpha_hat
    assert abs(responses / retained - expected) < 4.5 * se


def test_mixed_questions_converge_to_G_over_mean_alpha(make_monitor):
    """Questions redrawn at every attempt: responses per retained group tend to G / E_q[alpha_q]."""
    p, G = [0.02, 0.1, 0.5, 0.9, 1.0], 8
    loop = DapoLoop(make_monitor(), p=p, G=G, B=32, gen_batch=64, max_batches=10**6, truncate=False, seed=3)
    steps = [loop.step() for _ in range(30)]
    responses = sum(r.metrics["grpo/sampling/generated_responses"] for r, _ in steps)
    retained = sum(r.metrics["grpo/sampling/retained_groups"] for r, _ in steps)
    groups = sum(c.groups for _, c in steps)
    alpha = float(np.mean([float(theory.retention_probability(x, G)) for x in p]))
    se = G / alpha**2 * math.sqrt(alpha * (1 - alpha) / groups)
    assert abs(responses / retained - G / alpha) < 4.5 * se
    totals = steps[-1][0].metrics
    if "grpo/sampling/total_generated_responses" in totals:  # run totals, when the monitor keeps them
        assert totals["grpo/sampling/total_generated_responses"] == responses
        assert totals["grpo/sampling/total_retained_groups"] == retained


# ---------------------------------------------------------- iid theory vs observation


def _run(make_monitor, rho, steps=40, seed=1):
    loop = DapoLoop(make_monitor(), p=[0.05, 0.2, 0.5, 0.8, 0.95, 0.35], G=8, B=24, gen_batch=24, rho=rho, seed=seed)
    return [loop.step()[0].metrics for _ in range(steps)]


def test_iid_rollouts_match_the_iid_prediction(make_monitor):
    """iid rollouts: observed generated degenerate rate = iid prediction = exact theory; overdispersion ~ 0."""
    ms = _run(make_monitor, rho=0.0)[10:]
    observed = np.mean([m["grpo/sampling/generated_degenerate_rate"] for m in ms])
    predicted = np.mean([m["grpo/sampling/degenerate_rate_iid"] for m in ms])
    exact = np.mean([float(theory.degenerate_probability(x, 8)) for x in (0.05, 0.2, 0.5, 0.8, 0.95, 0.35)])
    assert predicted == pytest.approx(exact, abs=0.02)
    assert observed == pytest.approx(predicted, abs=0.03)
    assert abs(np.mean([m["grpo/groups/overdispersion"] for m in ms])) < 0.02
    assert all("grpo/groups/degenerate_rate_iid" in m for m in ms)


def test_correlated_rollouts_show_overdispersion(make_monitor):
    """Beta-binomial rollouts (rho = 0.3): more degenerate groups than iid predicts, overdispersion ~ rho."""
    ms = _run(make_monitor, rho=0.3)[10:]
    observed = np.mean([m["grpo/sampling/generated_degenerate_rate"] for m in ms])
    predicted = np.mean([m["grpo/sampling/degenerate_rate_iid"] for m in ms])
    assert observed > predicted + 0.1
    assert np.mean([m["grpo/groups/overdispersion"] for m in ms]) == pytest.approx(0.3, abs=0.08)


def test_plain_grpo_degenerate_rate_against_iid_prediction(make_monitor):
    """Without dynamic sampling the retained batch is the generated one: observed vs iid-predicted rate."""
    rng = np.random.default_rng(5)
    p = np.array([0.1, 0.3, 0.6, 0.9])
    mon = make_monitor()
    observed, predicted = [], []
    for _ in range(60):
        r = (rng.random((4, 8)) < p[:, None]).astype(float)
        mon.observe_rollout(r, advantages=(r - r.mean(1, keepdims=True)) / (r.std(1, keepdims=True) + 1e-4),
                            question_ids=["a", "b", "c", "d"])
        m = mon.end_step().metrics
        observed.append(m["grpo/groups/degenerate_rate"])
        predicted.append(m["grpo/groups/degenerate_rate_iid"])
    exact = np.mean([x**8 + (1 - x) ** 8 for x in p])
    assert np.mean(predicted[20:]) == pytest.approx(exact, abs=0.03)
    assert np.mean(observed) == pytest.approx(exact, abs=4 * math.sqrt(exact * (1 - exact) / 240))


def test_conditional_overdispersion_reference():
    """The estimator on hand-made groups: two questions, each seen in two groups (float64 by hand)."""
    y = np.array([3.0, 1.0, 4.0, 4.0])
    n = np.array([4.0, 4.0, 4.0, 4.0])
    pooled = np.array([[4.0, 4.0, 8.0, 8.0], [8.0, 8.0, 8.0, 8.0], [2.0, 2.0, 2.0, 2.0]])
    # question A: p = 1/2, A = (y - 2)^2 / (1/2) = 2 each, V = 4 * 1/4 * 8/7 = 8/7; question B: p = 1 (no info)
    expected = (2 * 2 - 2 * 8 / 7) / (2 * 3 * 8 / 7)
    assert conditional_overdispersion(y, n, pooled) == pytest.approx(expected, rel=1e-12)
    assert math.isnan(conditional_overdispersion(y, n, np.array([[3.0] * 4, [4.0] * 4, [1.0] * 4])))


def test_filtered_flags_discard_degenerate_groups_first():
    """Per question, generated minus retained groups are the discarded ones, degenerate groups first."""
    gen_q = ["a", "b", "a", "a", "c", "b"]
    degenerate = np.array([False, True, True, False, True, False])
    kept_q = ["a", "a", "b"]
    # a: 3 generated, 2 kept -> its degenerate group (index 2) discarded; b: 2 vs 1 -> index 1; c: 1 vs 0 -> index 4
    assert filtered_flags(gen_q, degenerate, kept_q).tolist() == [False, True, True, False, True, False]
    assert filtered_flags(gen_q, degenerate, ["zzz"]).tolist() == [True] * 6


# ------------------------------------------------------------ stuck questions and history


def test_questions_filtered_in_every_attempt_are_flagged(make_monitor):
    """A question never retained in ``stuck_after`` consecutive steps is flagged, with its id."""
    names = ["never", "always", "half", "third"]
    loop = DapoLoop(make_monitor(stuck_after=3), p=[0.0, 1.0, 0.5, 0.3], G=8, B=2, every_question=True,
                    names=names, seed=2)
    flagged = [loop.step()[0] for _ in range(4)]
    assert [r.flagged_questions for r in flagged[:2]] == [[], []]
    assert sorted(flagged[2].flagged_questions) == ["always", "never"]
    assert flagged[3].metrics["grpo/sampling/stuck_questions"] == 2


def test_history_is_capped_and_restored(make_monitor):
    """The history keeps history_cap questions; state_dict/load_state_dict resume it exactly."""
    p = [0.1, 0.3, 0.5, 0.7, 0.9, 0.6]
    first = DapoLoop(make_monitor(history_cap=4, table_every=1), p=p, G=8, B=8, gen_batch=6, seed=4)
    for _ in range(3):
        first.step()
    assert len(first.mon._run.questions.history) == 4
    saved = first.mon.state_dict()
    resumed_mon = make_monitor(history_cap=4, table_every=1)
    resumed_mon.load_state_dict(saved)
    resumed = DapoLoop(resumed_mon, p=p, G=8, B=8, gen_batch=6, seed=4)
    resumed.rng = np.random.default_rng(99)
    first.rng = np.random.default_rng(99)
    a, b = first.step()[0], resumed.step()[0]
    assert a.step == b.step == 3
    assert a.tables["grpo/questions"] == b.tables["grpo/questions"]
    for key in a.metrics:
        assert b.metrics[key] == pytest.approx(a.metrics[key], nan_ok=True), key
