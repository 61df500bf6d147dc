"""verl 0.9.1's real ``ray_trainer.compute_advantage`` on real DataProtos: one monitor step per call,
every estimator it dispatches to (a registry entry added after attach included), breaches out of the call."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pytest
import torch

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer")
    verl_losses = pytest.importorskip("verl.workers.utils.losses")
    distill_losses = pytest.importorskip("verl.trainer.distillation.losses")
    import verl.utils.torch_functional as verl_F
    from verl import DataProto
    from verl.trainer.config import AlgoConfig

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig  # noqa: E402
from grpo_monitor.estimators import ESTIMATORS  # noqa: E402
from grpo_monitor.integrations import verl as gverl  # noqa: E402

G, T = 8, 6


@pytest.fixture
def attached(tmp_path):
    """``attached(**attach_kwargs)`` -> the attachment (config strict, repro files in tmp_path); always detached."""

    def attach(**kwargs):
        kwargs.setdefault("config", MonitorConfig(strict=True, repro_dir=str(tmp_path)))
        kwargs.setdefault("sinks", None)
        return gverl.attach(**kwargs)

    yield attach
    gverl.detach()


@pytest.fixture
def monitor(tmp_path):
    """A given monitor attached to verl (no step per call: the KL tests end their steps)."""
    mon = GRPOMonitor(MonitorConfig(group_size=G, repro_dir=str(tmp_path), strict=True))
    gverl.attach(mon, step_per_call=False, sinks=None)
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


def data_proto(seed: int = 0, constant: dict[int, float] | None = None) -> tuple[DataProto, torch.Tensor]:
    """A real DataProto as verl's fit() has it before compute_advantage (rewards, mask, uid, log-probs)."""
    rewards, mask, uid, scores = shuffled_batch(seed=seed, constant=constant)
    g = torch.Generator().manual_seed(seed + 100)
    old = -torch.rand(len(uid), T, generator=g)
    tensors = {"token_level_rewards": rewards, "response_mask": mask, "old_log_probs": old,
               "ref_log_prob": old + 0.05 * torch.randn(len(uid), T, generator=g)}
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": uid}), scores


def reference_degenerate_rate(scores: torch.Tensor, uid: np.ndarray) -> float:
    """Groups whose rewards are all equal, counted with Python sets (independent of the monitor)."""
    by_uid: dict[str, set[float]] = {}
    for s, u in zip(scores.tolist(), uid.tolist(), strict=True):
        by_uid.setdefault(u, set()).add(s)
    return sum(len(v) == 1 for v in by_uid.values()) / len(by_uid)




ESTIMATOR_CASES = [
    pytest.param("grpo", True, "verl.grpo", id="grpo"),
    pytest.param("grpo", False, "verl.grpo_no_std", id="grpo-no-std"),
    pytest.param("grpo_vectorized", True, "verl.grpo_vectorized", id="grpo-vectorized"),
    pytest.param("grpo_passk", False, "verl.grpo_passk_no_std", id="grpo-passk-no-std"),
    pytest.param("gpg", True, "verl.gpg", id="gpg"),
    pytest.param("reinforce_plus_plus_baseline", True, "verl.reinforce_plus_plus_baseline", id="rpp-baseline"),
    pytest.param("reinforce_plus_plus", True, "verl.reinforce_plus_plus", id="rpp"),
    pytest.param("rloo", True, "verl.rloo", id="rloo"),
    pytest.param("rloo_vectorized", True, "verl.rloo_vectorized", id="rloo-vectorized"),
    pytest.param("grpo_passk", True, "verl.grpo_passk", id="grpo-passk"),
]


@pytest.mark.parametrize("name, by_std, entry", ESTIMATOR_CASES)
def test_each_compute_advantage_call_is_one_checked_step(name, by_std, entry, attached):
    """verl's dispatcher on a shuffled DataProto: one report per call, no breach, the declared entry, the exact
    degenerate rate and the DataProto's valid tokens; no end_step() anywhere."""
    att = attached()
    for step in range(2):
        data, scores = data_proto(seed=step, constant={0: 1.0})
        out = ray_trainer.compute_advantage(data, adv_estimator=name, norm_adv_by_std_in_grpo=by_std,
                                            config=AlgoConfig(norm_adv_by_std_in_grpo=by_std))
        assert out.batch["advantages"].shape == (len(scores), T)
        report = att.reports[-1]
        assert report.step == step and report.violations == []
        assert report.metrics["grpo/groups/degenerate_rate"] == reference_degenerate_rate(
            scores, data.non_tensor_batch["uid"])
        assert report.metrics["grpo/adv/convention_id"] == ESTIMATORS[entry].id
        assert report.metrics["grpo/tokens/valid"] == data.batch["response_mask"].sum().item()
    assert att.monitor.config.std_convention == entry and len(att.reports) == 2


@pytest.mark.parametrize("gamma, kl_in_reward, why", [
    pytest.param(0.99, False, "gamma < 1 discounts", id="discounted"),
    pytest.param(1.0, True, "a reward on every token", id="kl-in-reward"),
])
def test_reinforce_plus_plus_beyond_its_entry_observes_rewards_only(gamma, kl_in_reward, why, attached):
    """verl's reinforce_plus_plus with a discount, or with the KL in the token rewards, gives each token its own
    return: no entry holds that, so the call is observed for rewards and groups only, said once with the reason."""
    att = attached()
    data, _ = data_proto()
    if kl_in_reward:
        data.batch["token_level_scores"] = data.batch["token_level_rewards"].clone()
        data, _ = ray_trainer.apply_kl_penalty(data, kl_ctrl=core_algos.FixedKLController(kl_coef=0.1))
    with pytest.warns(RuntimeWarning, match=why):
        ray_trainer.compute_advantage(data, adv_estimator="reinforce_plus_plus", gamma=gamma,
                                      config=AlgoConfig(gamma=gamma))
    report = att.reports[-1]
    assert report.convention is None and report.violations == []


def _whitened_over(include_padding: bool, group_centred: bool):
    """verl's reinforce_plus_plus with one defect: the whitening statistics over every position (padding
    included), or each row's reward centred on its group first (the baseline variant run under this name)."""
    def estimator(token_level_rewards, response_mask, config=None, index=None, **kwargs):
        returns = token_level_rewards.flip(-1).cumsum(-1).flip(-1) * response_mask
        if group_centred:
            scores = token_level_rewards.sum(-1)
            ids = {u: i for i, u in enumerate(dict.fromkeys(index.tolist()))}
            gid = torch.tensor([ids[u] for u in index.tolist()])
            mean = torch.zeros(len(ids)).index_add_(0, gid, scores) / torch.bincount(gid).float()
            returns = (scores - mean[gid]).unsqueeze(-1) * response_mask
        stats_mask = torch.ones_like(response_mask) if include_padding else response_mask
        adv = verl_F.masked_whiten(returns, stats_mask) * response_mask
        return adv, returns

    return estimator


@pytest.mark.parametrize("include_padding, group_centred", [
    pytest.param(True, False, id="whitened-over-padding"),
    pytest.param(False, True, id="group-baseline-under-rpp"),
])
def test_a_reinforce_plus_plus_defect_raises(include_padding, group_centred, monkeypatch, attached):
    """Two realistic slips in a reinforce++ branch raise InvariantViolation out of compute_advantage."""
    monkeypatch.setitem(core_algos.ADV_ESTIMATOR_REGISTRY, "reinforce_plus_plus",
                        _whitened_over(include_padding, group_centred))
    attached()
    data, _ = data_proto()
    with pytest.raises(InvariantViolation, match="convention"):
        ray_trainer.compute_advantage(data, adv_estimator="reinforce_plus_plus", config=AlgoConfig())


def test_grpo_vectorized_ignores_the_no_std_flag_and_says_so(attached):
    """verl's grpo_vectorized divides by the std under compute_advantage even with norm_adv_by_std_in_grpo=False
    (the dispatcher never passes the flag): checked as what it computes, with one warning, no false breach."""
    att = attached()
    data, _ = data_proto()
    with pytest.warns(RuntimeWarning, match="norm_adv_by_std_in_grpo=False is ignored"):
        out = ray_trainer.compute_advantage(data, adv_estimator="grpo_vectorized",
                                            config=AlgoConfig(norm_adv_by_std_in_grpo=False))
    assert att.reports[-1].violations == [] and att.monitor.config.std_convention == "verl.grpo_vectorized"
    live = out.batch["advantages"][:, 0].abs().max()
    assert live > 1.0  # divided by a std < 1 (binary rewards): not r - mean, whose |value| is < 1


def test_constant_group_of_point_seven_warns_without_stopping(attached):
    """Eight rewards of 0.7: verl's float32 std is ~6e-8, epsilon 1e-6, so every advantage is ~0.056, not 0.

    That residue is verl's own float32 arithmetic (its stabilizer and the reward's ulp), 8% of a real
    group's weight: a warning naming the group, never a stop of a healthy default run.
    """
    data, _ = data_proto(constant={2: 0.7})
    plain = ray_trainer.compute_advantage(data, adv_estimator="grpo").batch["advantages"]  # not attached yet
    rows = torch.from_numpy(data.non_tensor_batch["uid"] == "uid-2")
    assert 0.04 < abs(float(plain[rows, 0][0])) < 0.07
    att = attached(config=MonitorConfig())
    with pytest.warns(RuntimeWarning, match="float32 residue"):
        ray_trainer.compute_advantage(data, adv_estimator="grpo")
    (violation,) = [v for v in att.reports[-1].violations if v.invariant == "degenerate_zero"]
    assert violation.groups == ("uid-2",) and violation.severity == "warning" and not att.reports[-1].failed


def _shifted(token_level_rewards, response_mask, index, config=None, **kwargs):
    """A user's estimator that forgets to centre (adds 0.1 to verl's GRPO advantages)."""
    adv, ret = core_algos.compute_grpo_outcome_advantage(token_level_rewards, response_mask, index)
    return adv + 0.1 * response_mask, ret


def test_an_estimator_registered_after_attach_is_checked_when_declared(attached, tmp_path):
    """A registry entry added after attach(), declared verl.grpo by the user: the breach raises out of
    compute_advantage (before update_actor could use the batch)."""
    att = attached(config=MonitorConfig(std_convention="verl.grpo", repro_dir=str(tmp_path)))
    core_algos.register_adv_est("grpo_monitor_test_shifted")(_shifted)
    try:
        data, _ = data_proto()
        with pytest.raises(InvariantViolation, match="zero_group_mean"):
            ray_trainer.compute_advantage(data, adv_estimator="grpo_monitor_test_shifted", config=AlgoConfig())
    finally:
        core_algos.ADV_ESTIMATOR_REGISTRY.pop("grpo_monitor_test_shifted")
    assert att.monitor.closed


def test_an_undeclared_unknown_estimator_observes_rewards_only(attached, tmp_path):
    """Without a declaration, an estimator with no registry entry gets one warning and rewards/groups only."""
    att = attached(config=MonitorConfig(repro_dir=str(tmp_path)))
    core_algos.register_adv_est("grpo_monitor_test_shifted")(_shifted)
    try:
        data, scores = data_proto()
        with pytest.warns(RuntimeWarning, match="'grpo_monitor_test_shifted' has no registry entry"):
            ray_trainer.compute_advantage(data, adv_estimator="grpo_monitor_test_shifted", config=AlgoConfig())
    finally:
        core_algos.ADV_ESTIMATOR_REGISTRY.pop("grpo_monitor_test_shifted")
    report = att.reports[-1]
    assert report.violations == [] and "grpo/adv/convention_id" not in report.metrics
    assert report.metrics["grpo/groups/total"] == 4


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
    pytest.param("compute_grpo_outcome_advantage", "grpo", True, lambda c, s: c / (s > 0).float().clamp(min=1),
                 id="walrus-divides-by-True"),
    pytest.param("grpo_vectorized", "grpo_vectorized", True, lambda c, s: c / (s * (7 / 8) ** 0.5),
                 id="vectorized-population-std"),
]


@pytest.mark.parametrize("slot, name, by_std, divide", SWAPS)
def test_a_branch_computing_another_valid_convention_is_an_error(slot, name, by_std, divide, monkeypatch, attached):
    """The attach declares what verl was asked for, so a branch that computes another (valid) convention
    raises InvariantViolation out of compute_advantage instead of matching "auto" silently."""
    buggy = _buggy(slot, divide)
    if slot in core_algos.ADV_ESTIMATOR_REGISTRY:
        monkeypatch.setitem(core_algos.ADV_ESTIMATOR_REGISTRY, slot, buggy)
    else:  # "grpo": compute_advantage calls the module attribute
        monkeypatch.setattr(core_algos, slot, buggy)
    attached()
    data, _ = data_proto()
    with pytest.raises(InvariantViolation, match="convention"):
        ray_trainer.compute_advantage(data, adv_estimator=name, norm_adv_by_std_in_grpo=by_std,
                                      config=AlgoConfig(norm_adv_by_std_in_grpo=by_std))


def test_detach_restores_the_originals_exactly():
    """After attach() + detach(), the dispatcher, the KL functions and their copies are the original objects."""
    names = ("kl_penalty", "kl_penalty_forward")
    before = {n: getattr(core_algos, n) for n in names}
    dispatcher, copies = ray_trainer.compute_advantage, (verl_losses.kl_penalty, distill_losses.kl_penalty)
    gverl.attach(sinks=None)
    assert ray_trainer.compute_advantage is not dispatcher
    assert verl_losses.kl_penalty is core_algos.kl_penalty is not before["kl_penalty"]
    gverl.detach()
    assert {n: getattr(core_algos, n) for n in names} == before
    assert ray_trainer.compute_advantage is dispatcher
    assert (verl_losses.kl_penalty, distill_losses.kl_penalty) == copies
    assert gverl.attached() is None


def test_attach_errors_are_worded():
    """Attaching twice, or passing both a monitor and a config, raises a message that says what to do."""
    with pytest.raises(ValueError, match="pass monitor or config, not both"):
        gverl.attach(GRPOMonitor(), config=MonitorConfig())
    gverl.attach(sinks=None)
    try:
        with pytest.raises(RuntimeError, match="already attached; call detach"):
            gverl.attach(sinks=None)
    finally:
        gverl.detach()


def test_sinks_auto_follows_trainer_logger(attached, tmp_path, capfd):
    """sinks="auto" reads trainer.logger of the calling trainer: ["console"] leaves no sink, so the monitor's log
    goes to <trainer.default_local_dir>/grpo-monitor/monitor.jsonl, printed."""
    from omegaconf import OmegaConf

    from grpo_monitor.sinks import read_jsonl

    class Trainer:  # the part of RayPPOTrainer that compute_advantage's caller exposes: self.config
        config = OmegaConf.create({"trainer": {"logger": ["console"], "default_local_dir": str(tmp_path / "ckpt")}})

        def fit(self, data):
            return ray_trainer.compute_advantage(data, adv_estimator="grpo")

    att = attached(sinks="auto")
    Trainer().fit(data_proto()[0])
    path = tmp_path / "ckpt" / "grpo-monitor" / "monitor.jsonl"
    assert str(path.resolve()) in capfd.readouterr().err
    att.monitor.close()
    assert [r["step"] for r in read_jsonl(path)] == [0]


@pytest.mark.parametrize("mode", ["token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum",
                                  "seq-mean-token-sum-norm"])
def test_loss_agg_mode_declared_and_driver_weights_derived(mode, tmp_path):
    """actor.loss_agg_mode declares the aggregation; the driver's weights are derived from response_mask."""
    from omegaconf import OmegaConf

    actor = OmegaConf.create({"loss_agg_mode": mode, "loss_scale_factor": None})
    mon = GRPOMonitor(MonitorConfig(group_size=G, repro_dir=str(tmp_path), strict=True, **gverl.loss_config(actor)))
    gverl.attach(mon, step_per_call=False, sinks=None)
    try:
        data, _ = data_proto(constant={0: 1.0})
        adv = ray_trainer.compute_advantage(data, adv_estimator="grpo").batch["advantages"]
        report = mon.end_step()
    finally:
        gverl.detach()
    m = report.metrics
    from grpo_monitor.stats.aggregations import AGGREGATIONS, resolve

    assert m["grpo/weights/measured"] == 0.0
    assert m["grpo/weights/aggregation_id"] == AGGREGATIONS[resolve(mode)[0]].index
    assert m["grpo/weights/degenerate_share"] == 0.0
    # derived: each response weighs |A| x L / D(L); the longest quarter's share from the mask directly
    lengths = data.batch["response_mask"].sum(-1).double()
    row_adv = adv[:, 0].double().abs()
    per_row = row_adv * (torch.ones_like(lengths) if mode == "seq-mean-token-mean" else lengths)
    top = torch.argsort(-lengths, stable=True)[: len(lengths) // 4]
    assert m["grpo/weights/long_quarter_share"] == pytest.approx(float(per_row[top].sum() / per_row.sum()), rel=1e-9)


# ---------------------------------------------------- the shipped default configuration
def shipped_algorithm():
    """``algorithm`` of verl's generated ``verl/trainer/config/_generated_ppo_trainer.yaml`` (the installed one)."""
    from pathlib import Path

    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    path = Path(ray_trainer.__file__).resolve().parents[1] / "config" / "_generated_ppo_trainer.yaml"
    return omega_conf_to_dataclass(OmegaConf.load(path).algorithm)


def _default_call(algo, adv_estimator: str, seed: int = 0, kl_in_reward: bool = False):
    """``compute_advantage`` as ``RayPPOTrainer.fit`` calls it, every argument from ``algo`` (``apply_kl_penalty``
    first when the KL goes into the reward)."""
    data, scores = data_proto(seed=seed, constant={0: 1.0})
    data.batch["token_level_scores"] = data.batch["token_level_rewards"].clone()
    if kl_in_reward:
        kl_ctrl = core_algos.FixedKLController(kl_coef=algo.kl_ctrl.kl_coef)
        data, _ = ray_trainer.apply_kl_penalty(data, kl_ctrl=kl_ctrl, kl_penalty=algo.kl_penalty)
    if adv_estimator == "gae":
        data.batch["values"] = 0.1 * torch.randn(data.batch["response_mask"].shape)
    out = ray_trainer.compute_advantage(data, adv_estimator=adv_estimator, gamma=algo.gamma, lam=algo.lam,
                                        num_repeat=1, norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo,
                                        config=algo)
    return out, scores


def test_shipped_default_is_gae_with_a_critic_said_once(attached):
    """verl's ppo_trainer.yaml defaults to adv_estimator=gae (a learned critic): rewards and groups observed, advantages
    not, one warning naming the critic over two steps."""
    algo = shipped_algorithm()
    assert algo.adv_estimator == "gae" and algo.use_kl_in_reward is False
    att = attached()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(2):
            _default_call(algo, algo.adv_estimator, seed=step)
    said = [str(w.message) for w in caught if str(w.message).startswith("grpo-monitor")]
    assert len(said) == 1 and "learned critic" in said[0]
    assert att.reports[-1].convention is None and att.reports[-1].violations == []


@pytest.mark.parametrize("kl_in_reward", [False, True], ids=["kl-loss", "kl-in-reward"])
def test_shipped_default_grpo_gets_its_advantages_checked(kl_in_reward, attached):
    """The yaml's defaults with adv_estimator=grpo (and with use_kl_in_reward, verl's apply_kl_penalty first): the
    advantages are checked against verl.grpo (not skipped), quiet, on the scores verl normalised."""
    algo = shipped_algorithm()
    att = attached()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, scores = _default_call(algo, "grpo", kl_in_reward=kl_in_reward)
    report = att.reports[-1]
    assert [str(w.message) for w in caught if str(w.message).startswith("grpo-monitor")] == []
    assert report.convention == "verl.grpo" and report.violations == []
    assert report.metrics["grpo/adv/convention_id"] == ESTIMATORS["verl.grpo"].id
    shaped = out.batch["token_level_rewards"].sum(-1)
    assert bool((shaped - scores).abs().max() > 1e-5) == kl_in_reward, "the KL penalty really entered the scores"


def test_a_defect_under_the_shipped_default_still_raises(attached, monkeypatch):
    """The default grpo returning advantages one row off their rewards raises out of compute_advantage."""
    real = core_algos.compute_grpo_outcome_advantage

    def rolled(*args, **kwargs):
        adv, ret = real(*args, **kwargs)
        return torch.roll(adv, 1, dims=0), ret

    monkeypatch.setattr(core_algos, "compute_grpo_outcome_advantage", rolled)
    attached()
    with pytest.raises(InvariantViolation) as info:
        _default_call(shipped_algorithm(), "grpo")
    assert {"zero_group_mean", "affine_in_rewards"} & {v.invariant for v in info.value.violations}
