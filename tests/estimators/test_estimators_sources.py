"""Frameworks not installed here, checked on small examples worked by hand from their source, and the seeds' tables.

Sources read (file @ commit):
- NeMo RL: nemo_rl/algorithms/utils.py::calculate_baseline_and_std_per_prompt and
  nemo_rl/algorithms/advantage_estimator.py::GRPOAdvantageEstimator @ 7ea279ab
- OpenRLHF: openrlhf/trainer/ppo_utils/experience_maker.py::compute_advantages_and_returns @ 3c3be623 (v0.11.0)
- AReaL: areal/utils/data.py::Normalization, areal/trainer/ppo/actor.py::_compute_advantages,
  examples/math/gsm8k_grpo.yaml @ 4aef98d8 (v1.0.4-17)
- ROLL: roll/utils/functionals.py::reward_norm @ 8eb27cc2
- SkyRL: skyrl/backends/skyrl_train/utils/ppo_utils.py and
  tests/backends/skyrl_train/utils/test_ppo_utils.py @ a9564572
- open-instruct: open_instruct/data_loader.py (advantage_normalization_type) @ e6c3044a
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from grpo_monitor.estimators import ESTIMATORS

TWO_OF_FOUR = np.array([1.0, 0.0, 1.0, 0.0])
ONE_OF_FOUR = np.array([1.0, 0.0, 0.0, 0.0])
G4 = np.zeros(4, dtype=int)


def run(name, rewards, gid=None, **kw):
    return ESTIMATORS[name](np.asarray(rewards, dtype=float), G4 if gid is None else np.asarray(gid), **kw)


# --- seeds ------------------------------------------------------------------------------


@pytest.mark.parametrize("name,value", [("population", 1.0), ("bessel", math.sqrt(3) / 2), ("leave_one_out", 2 / 3),
                                        ("none", 0.5)])
def test_seed_002_two_successes_at_g4(name, value):
    """Seed 002 section 2: r = (1, 0, 1, 0) gives +-1, +-0.866, +-0.6667 (RLOO) and +-0.5 (no std)."""
    np.testing.assert_allclose(run(name, TWO_OF_FOUR), value * np.array([1, -1, 1, -1]), rtol=1e-12)


@pytest.mark.parametrize("g", [2, 4, 8, 16])
def test_seed_000_one_success(g):
    """Seed 000 section 3: one success gives sqrt(G-1), failures -1/sqrt(G-1); Bessel scales by sqrt((G-1)/G)."""
    r = np.zeros(g)
    r[0] = 1.0
    gid = np.zeros(g, dtype=int)
    pop = ESTIMATORS["population"](r, gid)
    np.testing.assert_allclose(pop, [math.sqrt(g - 1)] + [-1 / math.sqrt(g - 1)] * (g - 1), rtol=1e-12)
    np.testing.assert_allclose(ESTIMATORS["bessel"](r, gid), pop * math.sqrt((g - 1) / g), rtol=1e-12)


@pytest.mark.parametrize("g,table", [(4, 0.8660), (8, 0.9354), (16, 0.9682), (32, 0.9841)])
def test_seed_002_bessel_live_std(g, table):
    """Seed 002 section 2.1 table, and the section 5 erratum: Bessel's live-group advantage std is sqrt((G-1)/G).

    The table prints 0.9841 at G=32 where sqrt(31/32) = 0.98425 (a second slip in seed 002;
    the other rows round exactly), hence the 2e-4 allowance against the printed values.
    """
    rng = np.random.default_rng(g)
    r = rng.normal(size=(50, g))
    adv = ESTIMATORS["bessel"](r.reshape(-1), np.repeat(np.arange(50), g)).reshape(50, g)
    np.testing.assert_allclose(adv.std(axis=1), math.sqrt((g - 1) / g), rtol=1e-12)
    assert abs(adv.std(axis=1)[0] - table) < 2e-4


def test_seed_002_rloo_identity():
    """RLOO equals G/(G-1) (r - mean) exactly (seed 002 section 2.2)."""
    r = np.random.default_rng(0).normal(size=8)
    gid = np.zeros(8, dtype=int)
    np.testing.assert_allclose(ESTIMATORS["leave_one_out"](r, gid), 8 / 7 * (r - r.mean()), rtol=1e-12)


# --- NeMo RL ------------------------------------------------------------------------------


def test_nemo_one_success_is_left_undivided():
    """(1,0,0,0): the success's others all fail (LOO std 0, undivided): 1; a failure: -(1/3) / sqrt(1/3) = -0.57735."""
    fail = -(1 / 3) / (math.sqrt(1 / 3) + 1e-6)
    np.testing.assert_allclose(run("nemo_rl.grpo", ONE_OF_FOUR), [1.0, fail, fail, fail], rtol=1e-12)


def test_nemo_two_successes():
    """(1,0,1,0): others of a success are (0,1,0): baseline 1/3, Bessel std sqrt(1/3): (2/3) / sqrt(1/3) = 1.1547."""
    x = (2 / 3) / (math.sqrt(1 / 3) + 1e-6)
    np.testing.assert_allclose(run("nemo_rl.grpo", TWO_OF_FOUR), [x, -x, x, -x], rtol=1e-12)


def test_nemo_pairs_are_never_divided():
    """Groups of two: one other, whose std is 0*inf = NaN -> 0 in NeMo, so a_i = r_i - r_j."""
    np.testing.assert_allclose(run("nemo_rl.grpo", [0.9, 0.2], [0, 0]), [0.7, -0.7], rtol=1e-12)


def test_nemo_without_leave_one_out_is_bessel():
    """use_leave_one_out_baseline=False: mean baseline, Bessel std (num_valid/(num_valid-1)), + 1e-6 where std > 0."""
    np.testing.assert_allclose(run("nemo_rl.grpo_no_loo", TWO_OF_FOUR),
                               0.5 / (math.sqrt(1 / 3) + 1e-6) * np.array([1, -1, 1, -1]), rtol=1e-12)
    assert not run("nemo_rl.grpo_no_loo", [0.3, 0.3, 0.3, 0.3]).any()


# --- OpenRLHF -----------------------------------------------------------------------------


@pytest.mark.parametrize("name,value", [("openrlhf.group_norm", 0.5 / (math.sqrt(1 / 3) + 1e-9)),
                                        ("openrlhf.rloo", 2 / 3), ("openrlhf.dr_grpo", 0.5)])
def test_openrlhf_group_estimators(name, value):
    """group_norm: (r - mean) / (torch.std + 1e-9); rloo: r - (sum - r)/(n - 1); dr_grpo: r - mean."""
    np.testing.assert_allclose(run(name, TWO_OF_FOUR), value * np.array([1, -1, 1, -1]), rtol=1e-12)


def test_openrlhf_reinforce_baseline_whitens_tokens():
    """Groups (1,0) and (1,1), lengths (1,3,2,2): c = (.5,-.5,0,0); token mean -1/8; population var 0.875/8."""
    rewards, gid, lengths = np.array([1.0, 0.0, 1.0, 1.0]), np.array([0, 0, 1, 1]), np.array([1.0, 3.0, 2.0, 2.0])
    want = np.array([0.625, -0.375, 0.125, 0.125]) / math.sqrt(0.875 / 8)
    np.testing.assert_allclose(run("openrlhf.reinforce_baseline", rewards, gid, lengths=lengths), want, rtol=1e-12)


# --- AReaL --------------------------------------------------------------------------------


def test_areal_group_then_token_whitening():
    """(1,0,1,0) + an all-ones group, lengths (2,4,2,4,1,1,1,1), eps 1e-5 in both Normalizations.

    Group z = +-0.5/(sqrt(1/3) + 1e-5); token mean -z/4 over 16 tokens; Bessel var
    (4 (1.25 z)^2 + 8 (0.75 z)^2 + 4 (0.25 z)^2) / 15 = 11 z^2 / 15.
    """
    rewards = np.array([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    gid, lengths = np.repeat([0, 1], 4), np.array([2.0, 4.0, 2.0, 4.0, 1.0, 1.0, 1.0, 1.0])
    z = 0.5 / (math.sqrt(1 / 3) + 1e-5)
    s = z * math.sqrt(11 / 15) + 1e-5
    want = np.array([1.25, -0.75, 1.25, -0.75, 0.25, 0.25, 0.25, 0.25]) * z / s
    np.testing.assert_allclose(run("areal.grpo", rewards, gid, lengths=lengths), want, rtol=1e-12)


def test_areal_reward_scaling_enters_before_the_group_std():
    """examples/math/gsm8k_grpo.yaml scales rewards by 10 after a -0.5 bias: only the stabilizer sees the scale."""
    rewards, gid = np.array([1.0, 0.0, 1.0, 0.0]), G4
    z = 5.0 / (10 * math.sqrt(1 / 3) + 1e-5)  # (r - 0.5) * 10 centred: +-5
    s = z * math.sqrt(4 / 3) + 1e-5  # equal weights: Bessel std of (+-z) over 4 rows
    got = run("areal.grpo", rewards, gid, reward_scaling=10.0, reward_bias=-0.5)
    np.testing.assert_allclose(got, z / s * np.array([1, -1, 1, -1]), rtol=1e-12)


# --- ROLL, SkyRL, open-instruct -----------------------------------------------------------


def test_roll_group_mean_over_batch_std():
    """(1,0,1,0 | 1,1,1,1): group means (.5, 1); batch torch.std of the 8 rewards = sqrt(1.5/7)."""
    rewards, gid = np.array([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0]), np.repeat([0, 1], 4)
    want = np.array([0.5, -0.5, 0.5, -0.5, 0, 0, 0, 0]) / (math.sqrt(1.5 / 7) + 1e-6)
    np.testing.assert_allclose(run("roll.reward_norm", rewards, gid), want, rtol=1e-12)


def test_skyrl_maxrl_matches_skyrl_test():
    """SkyRL's own test_compute_maxrl_advantage: sums (6, 3 | 9, 12) -> 1.5/(4.5+1e-6), -1.5/(10.5+1e-6), ..."""
    got = run("skyrl.maxrl", [6.0, 3.0, 9.0, 12.0], [0, 0, 1, 1])
    want = [1.5 / (4.5 + 1e-6), -1.5 / (4.5 + 1e-6), -1.5 / (10.5 + 1e-6), 1.5 / (10.5 + 1e-6)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_skyrl_grpo_singleton_fallback():
    """SkyRL's GRPO gives a one-row group mean 0, std 1: r / (1 + 1e-6)."""
    np.testing.assert_allclose(run("skyrl.grpo", [6.0, 3.0, 9.0], [0, 0, 1])[2], 9.0 / (1 + 1e-6), rtol=1e-12)


def test_skyrl_rloo_one_row_group_is_zero():
    """SkyRL's compute_rloo_outcome_advantage: (s - mean) n/(n-1), so (1,0,1,0) gives +-2/3; a one-row group gets 0
    (SkyRL logs "setting advantage to 0"), where verl's RLOO keeps the row's reward."""
    rewards, gid = [1.0, 0.0, 1.0, 0.0, 0.7], [0, 0, 0, 0, 1]
    np.testing.assert_allclose(run("skyrl.rloo", rewards, gid), [2 / 3, -2 / 3, 2 / 3, -2 / 3, 0.0], rtol=1e-12)
    assert run("verl.rloo", rewards, gid)[4] == 0.7


def test_open_instruct_population_std():
    """advantage_normalization_type='standard' uses np.std (population) + 1e-8; 'centered' (the default) r - mean."""
    want = 0.5 / (0.5 + 1e-8) * np.array([1, -1, 1, -1])
    np.testing.assert_allclose(run("open_instruct.standard", TWO_OF_FOUR), want, rtol=1e-12)
    np.testing.assert_allclose(run("open_instruct.centered", TWO_OF_FOUR), [0.5, -0.5, 0.5, -0.5])
