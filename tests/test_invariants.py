"""Invariants 1-6 and 8: quiet on correct trainer computations, firing on each constructed breach.

Every reference advantage function below is written here, in float32 as the trainers do,
after the code of TRL 1.16 (``GRPOTrainer._generate_and_score_completions``), verl 0.9.1
(``core_algos.compute_grpo_outcome_advantage`` / ``compute_rloo_outcome_advantage``) and
NeMo-RL (``calculate_baseline_and_std_per_prompt`` and its use in ``grpo.py``).
"""

from __future__ import annotations

import uuid
from collections import defaultdict

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# ----------------------------------------------------------------- TRL (flat rows, contiguous groups of G)


def _nanstd(x: torch.Tensor, dim: int | None = None, correction: int = 1) -> torch.Tensor:
    """TRL's nanstd: NaN-ignoring std with Bessel's correction (correction=0: population)."""
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    var = torch.nanmean((x - mean) ** 2, dim=dim, keepdim=True)
    count = torch.sum(~torch.isnan(x), dim=dim, keepdim=True)
    var = var * count / (count - correction)
    return torch.sqrt(var).squeeze() if dim is None else torch.sqrt(var).squeeze(dim)


def trl(rewards: torch.Tensor, G: int, scale_rewards: str = "group", correction: int = 1) -> torch.Tensor:
    """TRL: NaN (unscorable) rows out of the nan-aware baseline, std + 1e-4, NaN advantages set to 0."""
    r = rewards.float()
    mean = torch.nanmean(r.view(-1, G), dim=1).repeat_interleave(G)
    if scale_rewards == "batch":
        std = _nanstd(r, correction=correction).expand_as(r)
    else:
        std = _nanstd(r.view(-1, G), dim=1, correction=correction).repeat_interleave(G)
    adv = r - mean
    if scale_rewards != "none":
        adv = adv / (std + 1e-4)
    return torch.nan_to_num(adv, nan=0.0)


def trl_nansum_bug(rewards: torch.Tensor, G: int) -> torch.Tensor:
    """Older TRL: ``nansum`` over reward functions turned an unscorable row into reward 0 in the baseline."""
    return trl(torch.nan_to_num(rewards, nan=0.0), G)


# ------------------------------------------------------------------- verl (uid-grouped, rows anywhere)


def verl_grpo(scores: torch.Tensor, index, epsilon: float = 1e-6, norm_adv_by_std_in_grpo: bool = True) -> torch.Tensor:
    """verl GRPO: torch.std (Bessel) + epsilon per uid; a uid seen once gets mean 0, std 1."""
    scores = scores.float().clone()
    id2score = defaultdict(list)
    for i in range(len(scores)):
        id2score[index[i]].append(scores[i])
    id2mean, id2std = {}, {}
    for idx, values in id2score.items():
        t = torch.stack(values)
        id2mean[idx], id2std[idx] = (t.mean(), t.std()) if len(values) > 1 else (torch.tensor(0.0), torch.tensor(1.0))
    for i in range(len(scores)):
        if norm_adv_by_std_in_grpo:
            scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
        else:  # Dr. GRPO
            scores[i] = scores[i] - id2mean[index[i]]
    return scores


def verl_rloo(scores: torch.Tensor, index) -> torch.Tensor:
    """verl RLOO: r * n/(n-1) - mean * n/(n-1) per uid."""
    scores = scores.float().clone()
    id2score = defaultdict(list)
    for i in range(len(scores)):
        id2score[index[i]].append(scores[i])
    id2mean = {idx: torch.stack(v).mean() for idx, v in id2score.items()}
    for i in range(len(scores)):
        n = len(id2score[index[i]])
        scores[i] = scores[i] * n / (n - 1) - id2mean[index[i]] * n / (n - 1)
    return scores


# ----------------------------------------------------------------------------- NeMo-RL


def nemo_rl(rewards: torch.Tensor, prompts: torch.Tensor, leave_one_out_baseline: bool, normalize_rewards: bool):
    """NeMo-RL: per-prompt (leave-one-out) baseline and std by mask matrices; divide where std > 0."""
    rewards = rewards.float()
    valid = torch.ones_like(rewards)
    baseline, sq_baseline = torch.zeros_like(rewards), torch.zeros_like(rewards)
    for p in torch.unique(prompts):
        idx = torch.arange(len(prompts))[prompts == p]
        n = len(idx)
        mask = (1 - torch.eye(n)) if leave_one_out_baseline else torch.ones(n, n)
        num_valid = valid[idx].sum() - int(leave_one_out_baseline)
        baseline[idx] = (mask @ (rewards[idx] * valid[idx])) / num_valid
        sq_baseline[idx] = (mask @ (rewards[idx] ** 2 * valid[idx])) / num_valid
    std = (sq_baseline - baseline.square()).sqrt().nan_to_num(0)
    adv = rewards - baseline
    if normalize_rewards:
        nonzero = std > 0
        adv[nonzero] = adv[nonzero] / std[nonzero]
    return adv


# ---------------------------------------------------------------------------- batches


def binary_batch(seed: int, B: int = 48, G: int = 8, nan_frac: float = 0.0) -> torch.Tensor:
    """Binary rewards (B, G) with per-group success rates spread over (0, 1); NaN marks unscorable rows."""
    gen = torch.Generator().manual_seed(seed)
    r = (torch.rand(B, G, generator=gen) < torch.rand(B, 1, generator=gen)).float()
    if nan_frac:
        r[torch.rand(B, G, generator=gen) < nan_frac] = float("nan")
    return r


def continuous_batch(seed: int, B: int = 48, G: int = 8) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(B, G, generator=gen) * 2 - 0.5


def shuffled_uids(B: int, G: int, seed: int):
    """verl-style uid strings, one per prompt repeated G times, rows shuffled: (uids, permutation)."""
    uids = np.array([str(uuid.UUID(int=seed * 10_000 + i)) for i in range(B)], dtype=object)
    perm = torch.randperm(B * G, generator=torch.Generator().manual_seed(seed))
    return np.repeat(uids, G)[perm.numpy()], perm


def check(make_monitor, rewards, advantages, **kw):
    """One monitored step with the raise policy; returns the report."""
    config = {k: kw.pop(k) for k in ("group_size", "std_convention", "on_violation") if k in kw}
    mon = make_monitor(**config)
    mon.observe_rollout(rewards, advantages=advantages, **kw)
    return mon.end_step()


def breaches(make_monitor, rewards, advantages, **kw) -> dict[str, object]:
    """The violations of one step under the ignore policy, by invariant."""
    report = check(make_monitor, rewards, advantages, on_violation="ignore", **kw)
    return {v.invariant: v for v in report.violations}


# ------------------------------------------------------------ quiet on correct computations


def _trainer_case(name: str, rewards_kind: str):
    B, G = 48, 8
    r = binary_batch(1, B, G) if rewards_kind == "binary" else continuous_batch(1, B, G)
    flat = r.reshape(-1)
    if name.startswith("trl"):
        scale, correction = {"trl-group-bessel": ("group", 1), "trl-group-population": ("group", 0),
                             "trl-batch": ("batch", 1), "trl-none": ("none", 1)}[name]
        return dict(rewards=flat, advantages=trl(flat, G, scale, correction), group_size=G)
    uids, perm = shuffled_uids(B, G, seed=2)
    shuffled = flat[perm]
    if name == "verl-grpo-uid-shuffled":
        return dict(rewards=shuffled, advantages=verl_grpo(shuffled, uids), group_ids=uids)
    if name == "verl-dr-grpo-uid-shuffled":
        return dict(rewards=shuffled, advantages=verl_grpo(shuffled, uids, norm_adv_by_std_in_grpo=False),
                    group_ids=uids)
    if name == "verl-rloo-uid-shuffled":
        return dict(rewards=shuffled, advantages=verl_rloo(shuffled, uids), group_ids=uids)
    prompts = torch.arange(B).repeat_interleave(G)[perm]
    loo, norm = {"nemo-rl-mean-normalized": (False, True), "nemo-rl-loo-unnormalized": (True, False)}[name]
    return dict(rewards=shuffled, advantages=nemo_rl(shuffled, prompts, loo, norm), group_ids=prompts)


TRAINERS = ["trl-group-bessel", "trl-group-population", "trl-batch", "trl-none", "verl-grpo-uid-shuffled",
            "verl-dr-grpo-uid-shuffled", "verl-rloo-uid-shuffled", "nemo-rl-mean-normalized",
            "nemo-rl-loo-unnormalized"]
EXPECTED_CONVENTION = {"trl-group-bessel": "bessel", "trl-group-population": "population", "trl-batch": "batch",
                       "trl-none": "none", "verl-grpo-uid-shuffled": "bessel", "verl-dr-grpo-uid-shuffled": "none",
                       "verl-rloo-uid-shuffled": "leave_one_out", "nemo-rl-mean-normalized": "population",
                       "nemo-rl-loo-unnormalized": "leave_one_out"}


@pytest.mark.parametrize("rewards_kind", ["binary", "continuous"])
@pytest.mark.parametrize("trainer", TRAINERS)
def test_correct_trainer_computations_pass(make_monitor, trainer, rewards_kind):
    """TRL, verl (uid strings, shuffled rows), RLOO, Dr. GRPO and NeMo-RL advantages break no invariant."""
    case = _trainer_case(trainer, rewards_kind)
    report = check(make_monitor, case.pop("rewards"), case.pop("advantages"), **case)
    assert report.violations == []
    assert report.convention == EXPECTED_CONVENTION[trainer]


@pytest.mark.parametrize("rewards_kind, invariant",
                         [("continuous", "affine_in_rewards"), ("binary", "zero_group_mean")])
def test_nemo_rl_leave_one_out_with_normalization_has_per_row_denominators(make_monitor, rewards_kind, invariant):
    """Finding: NeMo-RL with leave_one_out_baseline=True AND normalize_rewards divides each row by the std
    of the *other* rows (per-row denominators). With continuous rewards the advantages are then not affine
    in the rewards within a group; with binary rewards (two values: any map is affine) the per-row scales
    leave a nonzero group mean. Either way it is flagged where z-scores are declared; under "auto" it is
    an estimator the registry does not know (nemo_rl.grpo takes the Bessel std of the others) that keeps
    the universal invariants: an unknown_estimator warning. With leave_one_out_baseline=False the same code
    computes population z-scores with no stabilizer and passes (test_correct_trainer_computations_pass)."""
    B, G = 48, 8
    r = (binary_batch(3, B, G) if rewards_kind == "binary" else continuous_batch(3, B, G)).reshape(-1)
    prompts = torch.arange(B).repeat_interleave(G)
    adv = nemo_rl(r, prompts, True, True)
    found = breaches(make_monitor, r, adv, group_ids=prompts, std_convention="population")
    assert invariant in found
    assert "per-row denominators" in found[invariant].hint
    auto = breaches(make_monitor, r, adv, group_ids=prompts)  # sane but unknown (std of the others, ddof 0)
    assert list(auto) == ["unknown_estimator"] and auto["unknown_estimator"].severity == "warning"


@pytest.mark.parametrize("correction", [1, 0], ids=["bessel", "population"])
def test_trl_unscorable_rows_handled_correctly_pass(make_monitor, correction):
    """NaN rows kept out of the nan-aware mean and std, with advantage 0 (TRL 1.16): no breach."""
    r = binary_batch(4, nan_frac=0.15).reshape(-1)
    report = check(make_monitor, r, trl(r, 8, "group", correction), group_size=8)
    assert report.violations == []
    assert report.metrics["grpo/rows/unscorable"] == int(torch.isnan(r).sum()) > 0


def test_trl_nansum_bug_is_flagged(make_monitor):
    """Unscorable rows counted as reward 0 in the baseline (nansum) give them nonzero advantages: flagged."""
    r = binary_batch(4, nan_frac=0.15).reshape(-1)
    found = breaches(make_monitor, r, trl_nansum_bug(r, 8), group_size=8)
    assert "unscorable_rows" in found and "zero_group_mean" in found


def test_verl_shuffled_uids_with_unscorable_rows(make_monitor):
    """NaN rows excluded from a uid group's statistics with advantage 0 pass, rows shuffled, uids as ids."""
    B, G = 32, 8
    r = binary_batch(5, B, G, nan_frac=0.2).reshape(-1)
    uids, perm = shuffled_uids(B, G, seed=5)
    shuffled = r[perm]
    scorable = ~torch.isnan(shuffled)
    adv = torch.zeros_like(shuffled)
    keep = np.flatnonzero(scorable.numpy())
    adv[scorable] = verl_grpo(shuffled[scorable], uids[keep])
    report = check(make_monitor, shuffled, adv, group_ids=uids)
    assert report.violations == []


# ----------------------------------------------------------------------- each invariant fires


def test_finite_fires_on_zero_over_zero(make_monitor):
    """Invariant 1: a zero std without a stabilizer (0/0) puts NaN advantages in all-equal groups."""
    r = binary_batch(6)
    a = (r - r.mean(1, keepdim=True)) / r.std(1, keepdim=True)
    found = breaches(make_monitor, r, a)
    assert set(found) == {"finite"}
    assert "NaN or infinite advantage" in found["finite"].observed


def test_finite_fires_on_an_infinite_reward_but_not_on_nan(make_monitor):
    """Invariant 1: rewards may be NaN (unscorable) but not infinite."""
    r = binary_batch(7).reshape(-1)
    a = trl(r, 8)
    r_bad = r.clone()
    r_bad[3] = float("inf")
    found = breaches(make_monitor, r_bad, a, group_size=8)
    assert "finite" in found and found["finite"].groups == (0,)
    r_nan = r.clone()
    r_nan[3] = float("nan")
    assert "finite" not in breaches(make_monitor, r_nan, trl(r_nan, 8), group_size=8)


def test_unscorable_rows_fire_on_a_nonzero_advantage(make_monitor):
    """Invariant 2: a NaN-reward row must carry advantage 0."""
    r = binary_batch(8, nan_frac=0.1).reshape(-1)
    a = trl(r, 8)
    row = int(torch.nonzero(torch.isnan(r))[0])
    a[row] = 0.5
    found = breaches(make_monitor, r, a, group_size=8)
    assert set(found) == {"unscorable_rows"} and found["unscorable_rows"].groups == (row // 8,)


@pytest.mark.parametrize("declared", [None, 8], ids=["undeclared", "declared-8"])
def test_group_size_fires_on_a_group_of_one(make_monitor, declared):
    """Invariant 3: verl's size-one uid branch (mean 0, std 1) is flagged whether or not G is declared."""
    B, G = 6, 8
    r = binary_batch(9, B, G).reshape(-1)[: B * G - 7]  # the last uid keeps one row
    uids = np.repeat(np.array([f"uid-{i}" for i in range(B)], dtype=object), G)[: B * G - 7]
    found = breaches(make_monitor, r, verl_grpo(r, uids), group_ids=uids, group_size=declared)
    assert "group_size" in found and found["group_size"].groups == ("uid-5",)
    assert "sizes [1]" in found["group_size"].observed


def test_group_size_fires_on_a_wrong_declared_size(make_monitor):
    """Invariant 3: groups of 4 when config.group_size says 8."""
    r = binary_batch(10, 16, 4)
    found = breaches(make_monitor, r, trl(r.reshape(-1), 4).view(16, 4), group_size=8)
    assert "group_size" in found and found["group_size"].count == 16


def test_zero_group_mean_fires_on_the_wrong_axis(make_monitor):
    """Invariant 4: the mean taken over the prompt axis (dim 0) instead of the group axis."""
    r = binary_batch(11)
    a = (r - r.mean(0, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)
    found = breaches(make_monitor, r, a)
    assert "zero_group_mean" in found
    assert "wrong axis" in found["zero_group_mean"].hint


def test_zero_group_mean_fires_on_a_batch_baseline(make_monitor):
    """Invariant 4: one batch-wide baseline where per-group means are declared. Under "auto" it is ROLL's
    shipped batch-mean estimator (norm_mean_type='batch', norm_std_type='batch') and is named, not flagged."""
    r = binary_batch(12)
    a = (r - r.mean()) / (r.std() + 1e-4)
    assert "zero_group_mean" in breaches(make_monitor, r, a, std_convention="trl.group")
    report = check(make_monitor, r, a, on_violation="ignore")
    assert report.violations == [] and report.convention == "roll.batch_norm"


def test_affine_fires_on_rows_misaligned_after_a_shuffle(make_monitor):
    """Invariant 5: rewards shuffled after the advantages were computed (the ids follow the rewards)."""
    B, G = 32, 8
    r = binary_batch(13, B, G).reshape(-1)
    uids, perm = shuffled_uids(B, G, seed=13)
    a = verl_grpo(r[perm], uids)
    swap = torch.randperm(len(r), generator=torch.Generator().manual_seed(0))
    found = breaches(make_monitor, r[perm], a[swap], group_ids=uids)
    assert "affine_in_rewards" in found


def test_affine_fires_on_a_sign_flip(make_monitor):
    """Invariant 5: negated advantages have a negative slope k_g."""
    r = binary_batch(14)
    found = breaches(make_monitor, r, -trl(r.reshape(-1), 8).view_as(r))
    assert set(found) == {"affine_in_rewards"}
    assert "min slope k_g -" in found["affine_in_rewards"].observed


def test_affine_fires_on_contiguous_view_over_interleaved_rows(make_monitor):
    """Invariant 5: rows laid out generation-major (prompt i at rows i, i+B, ...) grouped by view(-1, G)."""
    B, G = 24, 4
    r = binary_batch(15, B, G)
    interleaved = r.t().reshape(-1)  # row j belongs to prompt j % B
    wrong = trl(interleaved, G)  # contiguous groups of G: the wrong rows
    found = breaches(make_monitor, interleaved, wrong, group_ids=torch.arange(B * G) % B)
    assert found.keys() & {"affine_in_rewards", "zero_group_mean"}


@pytest.mark.parametrize("rewards_kind, invariant",
                         [("continuous", "affine_in_rewards"), ("binary", "zero_group_mean")])
def test_leave_one_out_std_with_tiny_epsilon_is_flagged(make_monitor, rewards_kind, invariant):
    """Invariants 4/5: a leave-one-out std + 1e-6 per row gives per-row denominators (and ~1e6 advantages
    where the other rows are all equal); binary rewards show it as a nonzero group mean, an error even under
    "auto" (the blow-up breaks the universal bound). With continuous rewards nothing blows up: declared
    z-scores flag the per-row denominators; "auto" warns of an unknown estimator."""
    B, G = 16, 4
    r = binary_batch(16, B, G) if rewards_kind == "binary" else continuous_batch(16, B, G)
    loo_mean = (r.sum(1, keepdim=True) - r) / (G - 1)
    loo_sq = ((r * r).sum(1, keepdim=True) - r * r) / (G - 1)
    loo_std = (loo_sq - loo_mean**2).clamp(min=0).sqrt()
    a = (r - loo_mean) / (loo_std + 1e-6)
    declared = {"std_convention": "population"} if rewards_kind == "continuous" else {}
    found = breaches(make_monitor, r, a, **declared)
    assert invariant in found and found[invariant].severity == "error"
    if rewards_kind == "binary":
        assert float(a.abs().max()) > 1e5
    else:
        assert list(breaches(make_monitor, r, a)) == ["unknown_estimator"]


def test_degenerate_zero_fires_on_the_float32_hazard(make_monitor):
    """Invariant 6: eight rewards of 0.7, torch.std (Bessel) and eps 1e-6 give a uniform ~0.056 advantage."""
    B, G = 32, 8
    r = binary_batch(17, B, G).reshape(-1)
    r[8:16] = 0.7
    uids = np.repeat(np.array([f"q{i}" for i in range(B)], dtype=object), G)
    a = verl_grpo(r, uids)
    assert 0.05 < float(a[8:16].abs().max()) < 0.07
    found = breaches(make_monitor, r, a, group_ids=uids)
    assert set(found) == {"degenerate_zero"} and found["degenerate_zero"].groups == ("q1",)


def test_degenerate_zero_tolerates_trl_default_stabilizer(make_monitor):
    """Invariant 6: TRL's eps 1e-4 leaves spurious values below 1e-3 on the same group, which pass."""
    r = binary_batch(17, 32, 8).reshape(-1)
    r[8:16] = 0.7
    report = check(make_monitor, r, trl(r, 8), group_size=8)
    assert report.violations == []
    assert 0 < report.metrics["grpo/adv/degenerate_abs_max"] < 1e-3


def test_degenerate_zero_tolerance_is_configurable(make_monitor):
    """A tighter degenerate_ratio turns TRL's spurious 6e-4 into a breach."""
    r = binary_batch(17, 32, 8).reshape(-1)
    r[8:16] = 0.7
    mon = make_monitor(group_size=8, on_violation="ignore", tolerances={"degenerate_ratio": 1e-4})
    mon.observe_rollout(r, advantages=trl(r, 8))
    assert [v.invariant for v in mon.end_step().violations] == ["degenerate_zero"]


# ---------------------------------------------------------------------- 8: token advantages


def test_token_advantages_constant_per_row(make_monitor):
    """Invariant 8: outcome-reward advantages broadcast over valid tokens pass; a varying row is flagged."""
    pytest.importorskip("grpo_monitor.stats.tokens")
    gen = torch.Generator().manual_seed(0)
    row_adv = torch.randn(16, generator=gen)
    mask = (torch.rand(16, 12, generator=gen) < 0.8).float()
    adv = row_adv[:, None].expand(16, 12).clone()
    adv[mask == 0] = 123.0  # padding may hold anything
    mon = make_monitor()
    mon.observe_loss(mask=mask, advantages=adv)
    assert mon.end_step().violations == []
    adv[2, int(torch.nonzero(mask[2])[0])] += 0.5
    mon = make_monitor(on_violation="ignore")
    mon.observe_loss(mask=mask, advantages=adv)
    assert [v.invariant for v in mon.end_step().violations] == ["token_constant_advantage"]


# ------------------------------------------------------------------------ property


CONVENTION_FNS = {
    "trl-bessel-1e-4": lambda r, G: trl(r, G, "group", 1),
    "trl-population-1e-4": lambda r, G: trl(r, G, "group", 0),
    "trl-batch": lambda r, G: trl(r, G, "batch", 1),
    "dr-grpo": lambda r, G: trl(r, G, "none"),
    "verl-bessel-1e-6": lambda r, G: verl_grpo(r, np.arange(len(r)) // G),
    "rloo": lambda r, G: verl_rloo(r, np.arange(len(r)) // G),
    "nemo-population": lambda r, G: nemo_rl(r, torch.arange(len(r)) // G, False, True),
}


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**31 - 1),
    G=st.integers(2, 12),
    B=st.integers(1, 24),
    binary=st.booleans(),
    shuffle=st.booleans(),
    convention=st.sampled_from(sorted(CONVENTION_FNS)),
)
def test_any_correct_convention_raises_nothing(make_monitor, seed, G, B, binary, shuffle, convention):
    """Property: correct advantages of any convention on random rewards break no invariant."""
    gen = torch.Generator().manual_seed(seed)
    r = ((torch.rand(B, G, generator=gen) < torch.rand(B, 1, generator=gen)).float() if binary
         else torch.rand(B, G, generator=gen)).reshape(-1)
    a = CONVENTION_FNS[convention](r, G)
    ids = torch.arange(B * G) // G
    if shuffle:
        perm = torch.randperm(B * G, generator=gen)
        r, a, ids = r[perm], a[perm], ids[perm]
    report = check(make_monitor, r, a, group_ids=ids)
    assert report.violations == []
