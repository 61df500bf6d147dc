"""verl 0.9.1's real estimators, wrapped where its trainer calls them: shuffled uid batches, the 0.7 group, detach."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pytest
import torch

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    verl_losses = pytest.importorskip("verl.workers.utils.losses")
    distill_losses = pytest.importorskip("verl.trainer.distillation.losses")

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig  # noqa: E402
from grpo_monitor.estimators import ESTIMATORS  # noqa: E402
from grpo_monitor.integrations import verl as gverl  # noqa: E402

G, T = 8, 6


@pytest.fixture
def monitor(tmp_path):
    """A monitor attached to verl for the test's duration (always detached afterwards)."""
    mon = GRPOMonitor(MonitorConfig(group_size=G, repro_dir=str(tmp_path), strict=True))
    gverl.attach(mon)
    yield mon
    gverl.detach()


def shuffled_batch(groups: int = 4, seed: int = 0, constant: dict[int, float] | None = None):
    """Binary outcome rewards on the last valid token, rows shuffled, uid strings per group (as verl builds them)."""
    g = torch.Generator().manual_seed(seed)
    b = groups * G
    scores = (torch.rand(b, generator=g) < 0.5).float()
    for group, value in (constant or {}).items():
        scores[group * G:(group + 1) * G] = value
    lengths = torch.randint(1, T + 1, (b,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(b, T)
    rewards[torch.arange(b), lengths - 1] = scores
    uid = np.array([f"uid-{i // G}" for i in range(b)], dtype=object)
    perm = torch.randperm(b, generator=g)
    return rewards[perm], mask[perm], uid[perm.numpy()], scores[perm]


def reference_degenerate_rate(scores: torch.Tensor, uid: np.ndarray) -> float:
    """Groups whose rewards are all equal, counted with Python sets (independent of the monitor)."""
    by_uid: dict[str, set[float]] = {}
    for s, u in zip(scores.tolist(), uid.tolist(), strict=True):
        by_uid.setdefault(u, set()).add(s)
    return sum(len(v) == 1 for v in by_uid.values()) / len(by_uid)


@pytest.mark.parametrize(
    "name, kwargs, convention",
    [
        pytest.param("grpo", {}, "verl.grpo", id="grpo"),
        pytest.param("grpo", {"norm_adv_by_std_in_grpo": False}, "verl.grpo_no_std", id="grpo-no-std"),
        pytest.param("grpo_vectorized", {}, "verl.grpo_vectorized", id="grpo-vectorized"),
        pytest.param("rloo", {}, "verl.rloo", id="rloo"),
        pytest.param("rloo_vectorized", {}, "verl.rloo_vectorized", id="rloo-vectorized"),
    ],
)
def test_healthy_shuffled_batch_passes(name, kwargs, convention, monitor):
    """verl's own estimator on shuffled rows, grouped by uid: no breach, the right convention and degenerate rate."""
    rewards, mask, uid, scores = shuffled_batch(constant={0: 1.0})
    fn = core_algos.get_adv_estimator_fn(name)
    adv, _ = fn(token_level_rewards=rewards, response_mask=mask, index=uid, **kwargs)
    assert adv.shape == (len(uid), T)
    report = monitor.end_step()
    assert report.violations == []
    assert report.metrics["grpo/groups/degenerate_rate"] == reference_degenerate_rate(scores, uid)
    assert report.metrics["grpo/adv/convention_id"] == list(ESTIMATORS).index(convention)
    assert report.metrics["grpo/tokens/valid"] == mask.sum().item()


def test_module_attribute_is_wrapped_where_ray_trainer_calls_it(monitor):
    """ray_trainer calls core_algos.compute_grpo_outcome_advantage for "grpo": that call is observed too."""
    rewards, mask, uid, _ = shuffled_batch()
    core_algos.compute_grpo_outcome_advantage(token_level_rewards=rewards, response_mask=mask, index=uid)
    assert monitor.end_step().metrics["grpo/groups/total"] == 4


def test_constant_group_of_point_seven_warns_without_stopping(tmp_path):
    """Eight rewards of 0.7: verl's float32 std is ~6e-8, epsilon 1e-6, so every advantage is ~0.056, not 0.

    That residue is verl's own float32 arithmetic (its stabilizer and the reward's ulp), 8% of a real
    group's weight: a warning naming the group, never a stop of a healthy default run.
    """
    rewards, mask, uid, _ = shuffled_batch(constant={2: 0.7})
    plain, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, uid)  # not attached: verl's own numbers
    rows = torch.from_numpy(uid == "uid-2")
    const_adv = plain[rows, 0]
    assert torch.allclose(const_adv, const_adv[0]) and 0.04 < abs(float(const_adv[0])) < 0.07
    mon = GRPOMonitor(MonitorConfig(group_size=G, repro_dir=str(tmp_path)))
    gverl.attach(mon)
    try:
        with pytest.warns(RuntimeWarning, match="float32 residue"):
            core_algos.get_adv_estimator_fn("grpo")(token_level_rewards=rewards, response_mask=mask, index=uid)
        report = mon.end_step()
    finally:
        gverl.detach()
    (violation,) = [v for v in report.violations if v.invariant == "degenerate_zero"]
    assert violation.groups == ("uid-2",) and violation.severity == "warning" and not report.failed


def test_a_broken_custom_estimator_is_caught(tmp_path):
    """A registered estimator that forgets to centre (adds 0.1) breaks zero_group_mean."""

    def shifted(token_level_rewards, response_mask, index, config=None, **kwargs):
        adv, ret = core_algos.compute_grpo_outcome_advantage(token_level_rewards, response_mask, index)
        return adv + 0.1 * response_mask, ret

    core_algos.register_adv_est("grpo_monitor_test_shifted")(shifted)
    mon = GRPOMonitor(MonitorConfig(group_size=G, repro_dir=str(tmp_path)))
    try:
        gverl.attach(mon, estimators=("grpo_monitor_test_shifted",), kl=False)
        rewards, mask, uid, _ = shuffled_batch()
        with pytest.raises(InvariantViolation, match="zero_group_mean"):
            core_algos.get_adv_estimator_fn("grpo_monitor_test_shifted")(
                token_level_rewards=rewards, response_mask=mask, index=uid)
    finally:
        gverl.detach()
        core_algos.ADV_ESTIMATOR_REGISTRY.pop("grpo_monitor_test_shifted")


def _logprobs(seed: int = 1, b: int = 6):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(b, T, generator=g) * 3
    ref = logp + 0.5 * torch.randn(b, T, generator=g)
    mask = (torch.arange(T)[None, :] < torch.randint(1, T + 1, (b,), generator=g)[:, None]).float()
    return logp, ref, mask


def _masked_mean64(x: torch.Tensor, mask: torch.Tensor) -> float:
    x, m = x.double(), mask.double()
    return float((x * m).sum() / m.sum())


@pytest.mark.parametrize("kind", ["low_var_kl", "k3+", "kl", "mse"])
def test_kl_penalty_is_observed_once_with_the_callers_mask(kind, monitor):
    """verl's KL (called through losses.py's own copy) reaches observe_loss once per call, on the masked tokens."""
    logp, ref, response_mask = _logprobs()
    kld = verl_losses.kl_penalty(logprob=logp, ref_logprob=ref, kl_penalty=kind)  # mask found in this frame
    m = monitor.end_step().metrics
    assert m["grpo/tokens/valid"] == response_mask.sum().item()
    assert m["grpo/kl/user_mean"] == pytest.approx(_masked_mean64(kld.detach(), response_mask), rel=1e-6)
    u = (ref - logp).double()
    k3 = torch.expm1(u) - u  # float64 reference of Schulman's k3
    assert m["grpo/kl/k3_mean"] == pytest.approx(_masked_mean64(k3, response_mask), rel=1e-6)
    if kind in ("low_var_kl", "k3+"):
        assert m["grpo/kl/user_k3_max_abs_diff"] < 1e-5


def test_kl_mask_context_and_missing_mask(monitor):
    """kl_mask(mask) supplies the mask; with no mask in reach the call is skipped with one warning."""
    logp, ref, mask = _logprobs()
    with gverl.kl_mask(mask):
        distill_losses.kl_penalty(logp, ref, "low_var_kl")
    assert monitor.end_step().metrics["grpo/tokens/valid"] == mask.sum().item()
    with pytest.warns(RuntimeWarning, match="kl_mask"):
        core_algos.kl_penalty(logp, ref, "low_var_kl")
    assert "grpo/tokens/valid" not in monitor.end_step().metrics


def test_detach_restores_the_originals_exactly():
    """After attach() + detach(), every module attribute and registry entry is the original object again."""
    names = ("compute_grpo_outcome_advantage", "compute_rloo_outcome_advantage", "kl_penalty", "kl_penalty_forward")
    before = {n: getattr(core_algos, n) for n in names}
    registry = dict(core_algos.ADV_ESTIMATOR_REGISTRY)
    copies = (verl_losses.kl_penalty, distill_losses.kl_penalty)
    gverl.attach(GRPOMonitor(MonitorConfig(group_size=G)))
    assert core_algos.compute_grpo_outcome_advantage is not before["compute_grpo_outcome_advantage"]
    assert core_algos.ADV_ESTIMATOR_REGISTRY["grpo"] is core_algos.compute_grpo_outcome_advantage
    assert verl_losses.kl_penalty is core_algos.kl_penalty is not before["kl_penalty"]
    gverl.detach()
    assert {n: getattr(core_algos, n) for n in names} == before
    assert all(core_algos.ADV_ESTIMATOR_REGISTRY[k] is v for k, v in registry.items())
    assert (verl_losses.kl_penalty, distill_losses.kl_penalty) == copies
    assert gverl.attached() is None


def test_attach_errors_are_worded():
    """Attaching twice, or naming an unknown estimator, raises a message that says what to do."""
    mon = GRPOMonitor(MonitorConfig(group_size=G))
    with pytest.raises(ValueError, match=r"not in verl's ADV_ESTIMATOR_REGISTRY"):
        gverl.attach(mon, estimators=("no_such_estimator",))
    gverl.attach(mon)
    try:
        with pytest.raises(RuntimeError, match="already attached; call detach"):
            gverl.attach(mon)
    finally:
        gverl.detach()


def _buggy(name: str, divide: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable:
    """A verl estimator function named ``name`` whose division by the group std is ``divide(centred, std)``."""

    def estimator(token_level_rewards, response_mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True, config=None):
        scores = token_level_rewards.sum(-1)
        ids = {u: i for i, u in enumerate(dict.fromkeys(index.tolist()))}
        gid = torch.tensor([ids[u] for u in index.tolist()])
        mean = torch.zeros(len(ids)).index_add_(0, gid, scores) / torch.bincount(gid).float()
        std = torch.stack([scores[gid == g].std() for g in range(len(ids))])
        adv = divide(scores - mean[gid], std[gid] + epsilon if norm_adv_by_std_in_grpo else std[gid])
        return adv.unsqueeze(-1) * response_mask, adv.unsqueeze(-1) * response_mask

    estimator.__name__ = name
    return estimator


SWAPS = [
    pytest.param("grpo", "compute_grpo_outcome_advantage", {}, lambda c, s: c / (s > 0).float().clamp(min=1),
                 id="walrus-divides-by-True"),
    pytest.param("grpo_vectorized", "compute_grpo_vectorized_outcome_advantage", {"norm_adv_by_std_in_grpo": False},
                 lambda c, s: c / (s + 1e-6), id="vectorized-ignores-no-std"),
]


@pytest.mark.parametrize("slot, fname, kwargs, divide", SWAPS)
def test_a_branch_computing_another_valid_convention_is_an_error(slot, fname, kwargs, divide, monkeypatch, tmp_path):
    """The attach declares what verl was asked for, so a branch that computes another (valid) convention
    raises InvariantViolation instead of matching "auto" silently."""
    monkeypatch.setitem(core_algos.ADV_ESTIMATOR_REGISTRY, slot, _buggy(fname, divide))
    rewards, mask, uid, _ = shuffled_batch()
    mon = GRPOMonitor(MonitorConfig(group_size=G, repro_dir=str(tmp_path)))
    gverl.attach(mon, estimators=(slot,))
    try:
        with pytest.raises(InvariantViolation, match="convention"):
            core_algos.get_adv_estimator_fn(slot)(token_level_rewards=rewards, response_mask=mask, index=uid, **kwargs)
    finally:
        gverl.detach()


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                  "seq-mean-token-sum-norm"])
def test_loss_agg_mode_declared_and_driver_weights_derived(mode, tmp_path):
    """actor.loss_agg_mode declares the aggregation; the driver's weights are derived from response_mask."""
    from omegaconf import OmegaConf

    actor = OmegaConf.create({"loss_agg_mode": mode, "loss_scale_factor": None})
    mon = GRPOMonitor(MonitorConfig(group_size=G, repro_dir=str(tmp_path), strict=True, **gverl.loss_config(actor)))
    gverl.attach(mon)
    try:
        rewards, mask, uid, scores = shuffled_batch(constant={0: 1.0})
        core_algos.compute_grpo_outcome_advantage(token_level_rewards=rewards, response_mask=mask, index=uid)
        report = mon.end_step()
    finally:
        gverl.detach()
    m = report.metrics
    from grpo_monitor.stats.aggregations import AGGREGATIONS, resolve

    assert m["grpo/weights/measured"] == 0.0
    assert m["grpo/weights/aggregation_id"] == AGGREGATIONS[resolve(mode)[0]].index
    assert m["grpo/weights/degenerate_share"] == 0.0
    # derived: each response weighs |A| x L / D(L); the longest quarter's share from the mask directly
    lengths = mask.sum(-1).double()
    adv = core_algos.compute_grpo_outcome_advantage(token_level_rewards=rewards, response_mask=mask, index=uid)[0]
    row_adv = adv[:, 0].double().abs()
    per_row = row_adv * (torch.ones_like(lengths) if mode == "seq-mean-token-mean" else lengths)
    top = torch.argsort(-lengths, stable=True)[: len(lengths) // 4]
    assert m["grpo/weights/long_quarter_share"] == pytest.approx(float(per_row[top].sum() / per_row.sum()), rel=1e-9)
