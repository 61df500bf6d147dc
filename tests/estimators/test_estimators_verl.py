"""The verl references reproduce verl 0.9.1's own advantage functions (``verl.trainer.ppo.core_algos``)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")

from estimator_batches import KINDS, Batch, draw  # noqa: E402
from grpo_monitor.estimators import ESTIMATORS  # noqa: E402

T = 30  # response length (tokens); lengths are drawn in [1, 29]

#: registry name -> (verl function name, extra keyword arguments)
CASES = {
    "verl.grpo": ("compute_grpo_outcome_advantage", {"norm_adv_by_std_in_grpo": True}),
    "verl.grpo_no_std": ("compute_grpo_outcome_advantage", {"norm_adv_by_std_in_grpo": False}),
    "verl.grpo_vectorized": ("compute_grpo_vectorized_outcome_advantage", {"norm_adv_by_std_in_grpo": True}),
    "verl.rloo": ("compute_rloo_outcome_advantage", {}),
    "verl.rloo_vectorized": ("compute_rloo_vectorized_outcome_advantage", {}),
    "verl.reinforce_plus_plus_baseline": ("compute_reinforce_plus_plus_baseline_outcome_advantage", {}),
    "verl.gpg": ("compute_gpg_outcome_advantage", {}),
    "verl.grpo_passk": ("compute_grpo_passk_outcome_advantage", {"config": {"norm_adv_by_std_in_grpo": True}}),
    "verl.grpo_passk_no_std": ("compute_grpo_passk_outcome_advantage",
                               {"config": {"norm_adv_by_std_in_grpo": False}}),
}


def run_verl(name: str, batch: Batch) -> np.ndarray:
    """verl's per-token advantages (float32 inputs, reward on the last valid token, uid strings)."""
    fn_name, kwargs = CASES[name]
    lengths = batch.lengths.astype(int)
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float32)
    rewards = np.zeros((len(lengths), T), dtype=np.float32)
    rewards[np.arange(len(lengths)), lengths - 1] = batch.rewards.astype(np.float32)
    index = np.array([f"uid-{g}" for g in batch.gid], dtype=object)
    adv, ret = getattr(core_algos, fn_name)(
        token_level_rewards=torch.from_numpy(rewards), response_mask=torch.from_numpy(mask), index=index, **kwargs
    )
    assert torch.equal(adv, ret)
    return adv.double().numpy()


def expected_tokens(name: str, batch: Batch) -> np.ndarray:
    per_row = ESTIMATORS[name](batch.rewards, batch.gid, lengths=batch.lengths)
    return per_row[:, None] * (np.arange(T)[None, :] < batch.lengths[:, None])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shuffle", [False, True], ids=["contiguous", "shuffled"])
@pytest.mark.parametrize("name", list(CASES))
def test_reference_matches_verl(name, kind, shuffle):
    """Per token, the float64 reference equals verl's float32 output to float32 precision."""
    batch = draw(kind, groups=6, size=4 if kind == "binary" else 5, seed=len(name), shuffle=shuffle)
    got = run_verl(name, batch)
    want = expected_tokens(name, batch)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("name", ["verl.grpo", "verl.grpo_no_std", "verl.grpo_vectorized", "verl.rloo",
                                  "verl.rloo_vectorized", "verl.gpg", "verl.reinforce_plus_plus_baseline"])
def test_singleton_groups_follow_verl(name):
    """One-row groups get verl's fallback (mean 0, std 1), or 0 for the vectorized RLOO."""
    base = draw("continuous", groups=4, size=3, seed=3)
    rewards = np.concatenate([base.rewards, [0.7, -0.4]])
    batch = Batch(rewards, np.concatenate([base.gid, [10, 11]]), np.concatenate([base.lengths, [5.0, 9.0]]), "x")
    want = expected_tokens(name, batch)
    np.testing.assert_allclose(run_verl(name, batch), want, rtol=1e-6, atol=1e-6)
    assert ESTIMATORS[name].singleton == ("zero" if name == "verl.rloo_vectorized" else "raw")


def test_passk_singleton_raises_like_verl():
    """verl's pass@k refuses a one-row group, and so does the reference."""
    batch = Batch(np.array([1.0, 0.0, 1.0]), np.array([0, 0, 1]), np.array([3.0, 4.0, 5.0]), "x")
    with pytest.raises(ValueError, match="at least 2"):
        run_verl("verl.grpo_passk", batch)
    with pytest.raises(ValueError, match="at least 2"):
        ESTIMATORS["verl.grpo_passk"](batch.rewards, batch.gid)


def test_passk_ignores_its_own_keyword():
    """Surprise kept on record: verl's pass@k reads norm_adv_by_std_in_grpo from config only."""
    batch = draw("graded", groups=3, size=4, seed=5)
    on = run_verl("verl.grpo_passk", batch)
    fn = core_algos.compute_grpo_passk_outcome_advantage
    lengths = batch.lengths.astype(int)
    mask = torch.from_numpy((np.arange(T)[None, :] < lengths[:, None]).astype(np.float32))
    rewards = torch.zeros(len(lengths), T)
    rewards[torch.arange(len(lengths)), torch.from_numpy(lengths - 1)] = torch.from_numpy(batch.rewards).float()
    index = np.array([str(g) for g in batch.gid], dtype=object)
    off, _ = fn(rewards, mask, index, norm_adv_by_std_in_grpo=False, config={})
    np.testing.assert_allclose(off.double().numpy(), on, rtol=1e-6)


@pytest.mark.parametrize("name", ["verl.grpo", "verl.grpo_vectorized", "verl.grpo_passk"])
@pytest.mark.parametrize("kind", KINDS)
def test_replay_recovers_verl_eps(name, kind):
    """From verl's float32 advantages the fit finds eps = 1e-6 (to float32 precision) and names the estimator."""
    from grpo_monitor.estimators import candidates, fit

    batch = draw(kind, groups=8, size=4 if kind == "binary" else 6, seed=17)
    per_row = run_verl(name, batch)[:, 0]
    found = fit(name, batch.rewards, batch.gid, per_row)
    assert abs(found.params["eps"] - 1e-6) < 2e-7 and found.residual < 1e-6
    fixed = candidates(batch.rewards, batch.gid, per_row, tol=1e-5, free=False)
    assert name in fixed and "trl.group" not in fixed
