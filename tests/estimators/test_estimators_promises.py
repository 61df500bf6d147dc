"""Each estimator keeps the invariants it promises, and breaks each one it does not (the table is tight)."""

from __future__ import annotations

import numpy as np
import pytest

from estimator_batches import KINDS, Batch, breaches, draw
from grpo_monitor.estimators import ESTIMATORS, PROMISES

ESTS = list(ESTIMATORS.values())
IDS = [e.name for e in ESTS]


def promise_batches(est, seed: int) -> list[Batch]:
    """Shuffled batches of every kind and two group sizes, two NaN rows, one all-equal group, unequal lengths."""
    return [
        draw(kind, groups=6, size=size, seed=seed + size, shuffle=True, nan_rows=2,
             columns=2 if est.multi_reward else 0, nonnegative=est.reward_domain == "nonnegative")
        for kind in KINDS for size in (3, 5)
    ]


def counterexamples(est) -> list[Batch]:
    """Batches meant to break what is not promised (plus, for multi-reward, a constant row sum with varying columns)."""
    out = [draw(kind, groups=5, size=4, seed=21, columns=2 if est.multi_reward else 0,
                nonnegative=est.reward_domain == "nonnegative") for kind in KINDS]
    if est.multi_reward:
        cols = np.array([[1.0, 0.0, 2.0], [0.0, 2.0, 1.0], [0.0, 0.0, 3.0]])  # row sums 3, 3, 3
        live = np.random.default_rng(0).normal(size=(3, 3))
        out.append(Batch(np.concatenate([cols, live]), np.repeat([0, 1], 3), np.full(6, 4.0), "constant-sum"))
    return out


@pytest.mark.parametrize("est", ESTS, ids=IDS)
@pytest.mark.parametrize("stabilizer", ["default", "large"])
def test_promises_hold(est, stabilizer):
    """Every promise holds to 1e-9 x typical |advantage| on random batches, at the default and at a large stabilizer."""
    over = {est.fit_param: 0.3} if stabilizer == "large" and est.fit_param else {}
    for batch in promise_batches(est, seed=len(est.name)):
        adv = est(batch.rewards, batch.gid, lengths=batch.lengths, **over)
        assert adv.dtype == np.float64 and adv.shape == (len(batch.gid),)
        found = breaches(est, batch, adv, **over)
        broken = {name: found[name] for name in est.promises if found[name] > 1e-9}
        assert not broken, f"{est.name} breaks its promises {broken} on a {batch.kind} batch"


TIGHT = [(e, inv) for e in ESTS for inv in PROMISES if inv not in e.promises]


@pytest.mark.parametrize("est,invariant", TIGHT, ids=[f"{e.name}-{inv}" for e, inv in TIGHT])
def test_unpromised_invariants_break(est, invariant):
    """An invariant left out of the promises is broken (by > 1e-3 x typical |advantage|) on some batch."""
    worst = max(breaches(est, b, est(b.rewards, b.gid, lengths=b.lengths))[invariant] for b in counterexamples(est))
    assert worst > 1e-3, f"{est.name} never breaks {invariant}: promise it, or find the batch that breaks it"


@pytest.mark.parametrize("est", ESTS, ids=IDS)
def test_promise_table_is_consistent(est):
    """Zero group means imply a zero batch mean; everyone honours unscorable rows; pass@k alone is sparse."""
    if "zero_group_mean" in est.promises and not est.token_weighted:
        assert "batch_zero_mean" in est.promises
    assert "unscorable_rows" in est.promises
    assert ("one_nonzero_per_group" in est.promises) == est.name.startswith("verl.grpo_passk")


def test_whitening_keeps_group_invariants_at_equal_lengths():
    """Token whitening breaks zero group means only through unequal lengths: equal lengths keep them."""
    batch = draw("continuous", groups=5, size=4, seed=4)
    for name in ("verl.reinforce_plus_plus_baseline", "openrlhf.reinforce_baseline", "areal.grpo", "areal.dr_grpo"):
        est = ESTIMATORS[name]
        equal = Batch(batch.rewards, batch.gid, np.full(len(batch.gid), 7.0), "equal")
        found = breaches(est, equal, est(equal.rewards, equal.gid, lengths=equal.lengths))
        assert found["zero_group_mean"] < 1e-9 and found["degenerate_zero"] < 1e-9
