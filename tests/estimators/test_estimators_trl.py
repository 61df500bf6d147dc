"""The TRL references reproduce TRL 1.16's advantage code, run from the installed source.

TRL computes advantages inside ``GRPOTrainer._generate_and_score_completions`` (not a
separable function). The test reads that method's source from the installed package and
executes exactly its block from ``unscorable_mask = ...`` to ``advantages =
torch.nan_to_num(...)`` with a stand-in ``self`` that holds the three attributes it reads,
so the torch ops are TRL's own, not a copy.
"""

from __future__ import annotations

import inspect
import textwrap
import types

import numpy as np
import pytest
import torch

grpo_trainer = pytest.importorskip("trl.trainer.grpo_trainer")

from estimator_batches import KINDS, draw  # noqa: E402
from grpo_monitor.estimators import ESTIMATORS  # noqa: E402

FIRST = "unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)"
LAST = "advantages = torch.nan_to_num(advantages, nan=0.0)"


def _trl_block():
    src = inspect.getsource(grpo_trainer.GRPOTrainer._generate_and_score_completions)
    if FIRST not in src or LAST not in src:
        pytest.fail("TRL's advantage block moved: _generate_and_score_completions no longer holds "
                    f"{FIRST!r} ... {LAST!r}; update this test to the installed TRL")
    start = src.rindex("\n", 0, src.index(FIRST)) + 1
    block = textwrap.dedent(src[start:src.index(LAST) + len(LAST)])
    return compile(block, grpo_trainer.__file__, "exec")


BLOCK = _trl_block()


def run_trl(rewards_per_func: np.ndarray, size: int, *, scale: str = "group", aggregation: str = "sum_then_normalize",
            weights=None) -> np.ndarray:
    """TRL's advantages for ``rewards_per_func`` (N, K) in contiguous groups of ``size``, float32 as TRL runs."""
    k = rewards_per_func.shape[1]
    trainer = types.SimpleNamespace(
        multi_objective_aggregation=aggregation, scale_rewards=scale, reward_funcs=[None] * k,
        reward_weights=torch.tensor(weights if weights is not None else [1.0] * k, dtype=torch.float32),
    )
    scope = dict(vars(grpo_trainer))
    scope.update(self=trainer, rewards_per_func=torch.tensor(rewards_per_func, dtype=torch.float32),
                 num_generations=size, device="cpu")
    exec(BLOCK, scope)
    return scope["advantages"].double().numpy()


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("nan_rows", [0, 2], ids=["scorable", "unscorable-rows"])
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_single_reward_matches_trl(scale, nan_rows, kind):
    """scale_rewards group/batch/none: TRL's output equals trl.<scale>, NaN rows included (TRL's rule is ours)."""
    batch = draw(kind, groups=5, size=4, seed=7, nan_rows=nan_rows)
    got = run_trl(batch.rewards[:, None], 4, scale=scale)
    _close(got, ESTIMATORS[f"trl.{scale}"](batch.rewards, batch.gid))


@pytest.mark.parametrize("kind", KINDS)
def test_weighted_sum_then_normalize_matches_trl(kind):
    """Two reward functions, weights (1, 0.5), partly-NaN cells: trl.group on the weighted row sums."""
    batch = draw(kind, groups=5, size=4, seed=11, nan_rows=1, columns=2)
    rewards = batch.rewards.copy()
    rewards[5, 1] = np.nan  # one function did not score this row, the other did
    est = ESTIMATORS["trl.normalize_then_sum"]
    rows = est.row_rewards(rewards, weights=(1.0, 0.5))
    _close(run_trl(rewards, 4, weights=[1.0, 0.5]), ESTIMATORS["trl.group"](rows, batch.gid))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("weights", [None, (1.0, 0.5)], ids=["unweighted", "weighted"])
def test_normalize_then_sum_matches_trl(kind, weights):
    """multi_objective_aggregation='normalize_then_sum' equals trl.normalize_then_sum, NaN cells and rows included."""
    batch = draw(kind, groups=5, size=4, seed=13, nan_rows=1, columns=2)
    rewards = batch.rewards.copy()
    rewards[6, 0] = np.nan
    got = run_trl(rewards, 4, aggregation="normalize_then_sum", weights=list(weights) if weights else None)
    _close(got, ESTIMATORS["trl.normalize_then_sum"](rewards, batch.gid, weights=weights))


def test_group_left_with_one_scorable_row_gets_zero():
    """Three NaN rows in a group of four: TRL's nanstd is NaN there and the row's advantage 0, as in the reference."""
    batch = draw("continuous", groups=3, size=4, seed=2)
    rewards = batch.rewards.copy()
    rewards[1:4] = np.nan
    for scale in ("group", "batch", "none"):
        got = run_trl(rewards[:, None], 4, scale=scale)
        assert got[0] == 0.0
        _close(got, ESTIMATORS[f"trl.{scale}"](rewards, batch.gid))


@pytest.mark.parametrize("scale", ["group", "batch"])
def test_replay_recovers_trl_eps(scale):
    """From TRL's float32 advantages the fit finds its hard-coded 1e-4, and free=False tells it from verl's 1e-6."""
    from grpo_monitor.estimators import candidates, fit

    batch = draw("graded", groups=8, size=4, seed=19, nan_rows=2)
    adv = run_trl(batch.rewards[:, None], 4, scale=scale)
    found = fit(f"trl.{scale}", batch.rewards, batch.gid, adv)
    assert abs(found.params["eps"] - 1e-4) < 1e-6 and found.residual < 1e-6
    fixed = candidates(batch.rewards, batch.gid, adv, tol=1e-5, free=False)
    assert f"trl.{scale}" in fixed and "verl.grpo" not in fixed and "roll.reward_norm" not in fixed
