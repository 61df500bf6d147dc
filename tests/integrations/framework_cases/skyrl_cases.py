"""SkyRL's real ``ppo_utils.compute_advantages_and_returns`` (skyrl-train and skyrl) with grpo-monitor attached.

Run in the SkyRL venv: ``python skyrl_cases.py [CASE ...]``; prints ``GRPO_CASES {json}``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from _cases import config_kwargs, outcome_batch, reference_error, run, summary
from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.estimators import ESTIMATORS
from grpo_monitor.integrations import skyrl as gsk
from grpo_monitor.integrations._common import row_advantages

gsk.allow_python311()
import skyrl.backends.skyrl_train.utils.ppo_utils as new_utils  # noqa: E402
import skyrl_train.utils.ppo_utils as old_utils  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

G, T, GROUPS = 4, 6, 4
PACKAGES = {"skyrl_train": old_utils, "skyrl": new_utils}


def batch(seed: int = 0, pad: int = 1):
    """token_level_rewards (reward on the last valid token), response_mask, uid index: shuffled, + DP padding rows."""
    scores, lengths, mask, perm = outcome_batch(GROUPS, G, T, seed)
    rewards = torch.zeros(len(scores), T)
    rewards[torch.arange(len(scores)), lengths - 1] = scores
    uid = np.array([f"uid-{i // G}" for i in range(len(scores))], dtype=object)
    rewards, mask, uid = rewards[perm], mask[perm], uid[perm.numpy()]
    # what RayPPOTrainer.pad_batch appends: copies of the first rows, uids pad0, pad1, ...
    rewards, mask = torch.cat([rewards, rewards[:pad]]), torch.cat([mask, mask[:pad]])
    return rewards, mask, np.concatenate([uid, np.array([f"pad{i}" for i in range(pad)], dtype=object)])


def call(utils, estimator: str, norm: bool = True, seed: int = 0, pad: int = 1, gamma: float = 1.0, **kwargs):
    rewards, mask, uid = batch(seed, pad)
    adv, _ = utils.compute_advantages_and_returns(
        token_level_rewards=rewards, response_mask=mask, index=uid, adv_estimator=estimator,
        config=OmegaConf.create({"advantage_estimator": estimator}), values=None, grpo_norm_by_std=norm,
        gamma=gamma, lambd=1.0, **kwargs)
    real = ~np.char.startswith(uid.astype(str), "pad")
    return rewards[real].sum(-1), uid[real], row_advantages(adv[real], mask[real]), mask[real].sum(-1)


def healthy(package: str, estimator: str, norm: bool = True, pad: int = 1, gamma: float = 1.0, **kwargs) -> dict:
    att = gsk.attach(config=MonitorConfig(**config_kwargs()))
    try:
        rows = call(PACKAGES[package], estimator, norm, pad=pad, gamma=gamma, **kwargs)
        result = summary(att)
    finally:
        gsk.detach()
    declared = gsk.declared_estimator(estimator, norm, kwargs.get("epsilon"), gamma=gamma, padded=pad > 0).estimator
    if declared is not None:
        params = {"eps": kwargs["epsilon"]} if "epsilon" in kwargs else {}
        result["reference_error"] = reference_error(declared, *rows, **params)
    return result


def broken_batch_std(package: str) -> dict:
    """A "grpo" registered in SkyRL's registry that divides by the batch's std instead of each group's."""
    utils = PACKAGES[package]
    registry = utils.AdvantageEstimatorRegistry
    real = registry.get("grpo")

    def batch_std_grpo(token_level_rewards, response_mask, index, **kwargs):
        centred, _ = real(token_level_rewards, response_mask, index, grpo_norm_by_std=False)
        scores = token_level_rewards.sum(-1)
        adv = centred / (scores.std() + 1e-6)
        return adv, adv

    registry.unregister("grpo")
    registry.register("grpo", batch_std_grpo)
    gsk.attach(config=MonitorConfig(**config_kwargs()))
    try:
        call(utils, "grpo")
        return {"raised": None}
    finally:
        gsk.detach()
        registry.unregister("grpo")
        registry.register("grpo", real)


def broken_reinforce_plus_plus() -> dict:
    """A "reinforce++" registered in SkyRL's registry whose advantages come back one row off their rewards."""
    registry = new_utils.AdvantageEstimatorRegistry
    real = registry.get("reinforce++")

    def rolled(token_level_rewards, response_mask, **kwargs):
        adv, ret = real(token_level_rewards, response_mask, **kwargs)
        return adv.roll(1, 0) * response_mask, ret

    registry.unregister("reinforce++")
    registry.register("reinforce++", rolled)
    gsk.attach(config=MonitorConfig(**config_kwargs()))
    try:
        call(new_utils, "reinforce++", pad=0)
        return {"raised": None}
    finally:
        gsk.detach()
        registry.unregister("reinforce++")
        registry.register("reinforce++", real)


def my_estimator(variant: str) -> dict:
    """A user's own estimator registered in SkyRL's registry, declared with MonitorConfig(std_convention=fn)."""
    import my_estimator as mine

    registry = new_utils.AdvantageEstimatorRegistry

    def user_estimator(token_level_rewards, response_mask, index, **kwargs):
        adv = mine.rows(token_level_rewards.sum(-1), np.asarray(index), variant, G)[:, None] * response_mask
        return adv, adv

    registry.register("mine", user_estimator)
    att = gsk.attach(config=MonitorConfig(std_convention=mine.reference, **config_kwargs()))
    try:
        rewards, mask, uid = batch(0, pad=0)
        new_utils.compute_advantages_and_returns(
            token_level_rewards=rewards, response_mask=mask, index=uid, adv_estimator="mine",
            config=OmegaConf.create({"advantage_estimator": "mine"}), values=None, grpo_norm_by_std=True,
            gamma=1.0, lambd=1.0)
        return summary(att)
    finally:
        gsk.detach()
        registry.unregister("mine")


def estimator_changes() -> dict:
    """The monitor is declared by the first call; a later call with another estimator is not checked (one warning)."""
    att = gsk.attach(config=MonitorConfig(**config_kwargs()))
    try:
        call(new_utils, "grpo")
        call(new_utils, "rloo", seed=1)
        return summary(att)
    finally:
        gsk.detach()


def detach_restores() -> dict:
    before = {name: utils.compute_advantages_and_returns for name, utils in PACKAGES.items()}
    att = gsk.attach(GRPOMonitor(MonitorConfig(**config_kwargs())))
    patched = sorted(p.owner.__name__ for p in att.patches)
    wrapped = all(PACKAGES[n].compute_advantages_and_returns is not f for n, f in before.items())
    gsk.detach()
    restored = all(PACKAGES[n].compute_advantages_and_returns is f for n, f in before.items())
    return {"patched": patched, "wrapped": wrapped, "restored": restored}


# ------------------------------------------------- the shipped default configuration
def shipped_algorithm():
    """``trainer.algorithm`` of SkyRL's own ``skyrl_train/config/ppo_base_config.yaml`` (the installed file)."""
    import importlib.util
    from pathlib import Path

    root = Path(importlib.util.find_spec("skyrl_train").origin).parent
    return OmegaConf.load(root / "config" / "ppo_base_config.yaml").trainer.algorithm


def kl_shaped(rewards: torch.Tensor, mask: torch.Tensor, algo, seed: int = 3) -> torch.Tensor:
    """The token rewards less ``kl_loss_coef`` x SkyRL's ``compute_approx_kl`` (trainer.py::apply_reward_kl_penalty)."""
    gen = torch.Generator().manual_seed(seed)
    logp = -torch.rand(rewards.shape, generator=gen)
    base = logp + 0.3 * torch.randn(rewards.shape, generator=gen)
    kl = new_utils.compute_approx_kl(logp, base, loss_mask=mask, kl_estimator_type=algo.kl_estimator_type)
    return rewards - kl * max(0.0, float(algo.kl_loss_coef))


def default_call(algo, seed: int = 0, values: bool = False):
    """The dispatcher as RayPPOTrainer.compute_advantages_and_returns calls it, every argument from ``algo``."""
    rewards, mask, uid = batch(seed)
    if algo.use_kl_in_reward:
        rewards = kl_shaped(rewards, mask, algo)
    adv, _ = new_utils.compute_advantages_and_returns(
        token_level_rewards=rewards, response_mask=mask, index=uid, adv_estimator=algo.advantage_estimator,
        config=algo, values=0.1 * torch.randn(mask.shape) if values else None, gamma=algo.gamma, lambd=algo.lambd,
        grpo_norm_by_std=algo.grpo_norm_by_std)
    real = ~np.char.startswith(uid.astype(str), "pad")
    return rewards[real].sum(-1), uid[real], row_advantages(adv[real], mask[real]), mask[real].sum(-1)


def default_healthy(**overrides) -> dict:
    algo = shipped_algorithm()
    shipped = {k: algo[k] for k in ("advantage_estimator", "use_kl_in_reward", "use_kl_loss", "kl_loss_coef",
                                    "gamma", "lambd", "grpo_norm_by_std")}
    for key, value in overrides.items():
        algo[key] = value
    att = gsk.attach(config=MonitorConfig(**config_kwargs()))
    try:
        rows = default_call(algo, values=algo.advantage_estimator == "gae")
        result = summary(att)
    finally:
        gsk.detach()
    result["shipped"] = shipped
    if result.get("convention"):
        result["reference_error"] = reference_error(result["convention"], *rows)
        result["kl_in_rewards"] = float((rows[0] - rows[0].round()).abs().max())  # scores 0/1 without the KL
    return result


def default_broken() -> dict:
    """SkyRL's default ``grpo`` registered back with its advantages one row off their rewards."""
    registry = new_utils.AdvantageEstimatorRegistry
    real = registry.get("grpo")

    def rolled_grpo(token_level_rewards, response_mask, index, **kwargs):
        adv, ret = real(token_level_rewards, response_mask, index, **kwargs)
        return torch.roll(adv, 1, dims=0), ret

    registry.unregister("grpo")
    registry.register("grpo", rolled_grpo)
    gsk.attach(config=MonitorConfig(**config_kwargs()))
    try:
        default_call(shipped_algorithm())
        return {"raised": None}
    finally:
        gsk.detach()
        registry.unregister("grpo")
        registry.register("grpo", real)


# ------------------------------------------- compute_rloo_outcome_advantage itself
def rloo_direct(package: str, kind: str) -> dict:
    """SkyRL's ``compute_rloo_outcome_advantage`` called directly on a batch of ``kind`` (uid rows shuffled, one
    constant group, two one-row groups, reward on the last valid token): the largest per-token gap to
    ``skyrl.rloo`` and to ``verl.rloo`` (which keeps a one-row group's reward), in units of the largest |advantage|."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "estimators"))
    from estimator_batches import draw

    b = draw(kind, groups=6, size=5, seed=11, shuffle=True)
    rewards = np.concatenate([b.rewards, [0.7, -0.4]]).astype(np.float32)
    gid, lengths = np.concatenate([b.gid, [10, 11]]), np.concatenate([b.lengths, [5.0, 9.0]]).astype(int)
    mask = torch.from_numpy((np.arange(30)[None, :] < lengths[:, None]).astype(np.float32))
    tokens = torch.zeros(len(rewards), 30)
    tokens[torch.arange(len(rewards)), torch.from_numpy(lengths - 1)] = torch.from_numpy(rewards)
    index = np.array([f"uid-{g}" for g in gid], dtype=object)
    adv, ret = PACKAGES[package].compute_rloo_outcome_advantage(token_level_rewards=tokens, response_mask=mask,
                                                                 index=index)
    got, m = adv.double().numpy(), mask.double().numpy()

    def gap(name: str) -> float:
        want = ESTIMATORS[name](rewards.astype(np.float64), gid)[:, None] * m
        return float(np.abs(got - want).max() / np.abs(want).max())

    return {"skyrl.rloo": gap("skyrl.rloo"), "verl.rloo": gap("verl.rloo"), "returns_are_advantages":
            bool(torch.equal(adv, ret)), "singleton_max": float(np.abs(got[-2:]).max())}


DEFAULT_CASES = {
    "default_grpo": default_healthy,
    "default_grpo_kl_in_reward": lambda: default_healthy(use_kl_in_reward=True, use_kl_loss=False),
    "default_rloo_kl_in_reward": lambda: default_healthy(advantage_estimator="rloo", use_kl_in_reward=True,
                                                         use_kl_loss=False),
    "default_gae": lambda: default_healthy(advantage_estimator="gae"),
    "default_broken_rolled": default_broken,
}

CASES = {
    **DEFAULT_CASES,
    **{f"{pkg}-grpo": (lambda pkg=pkg: healthy(pkg, "grpo")) for pkg in PACKAGES},
    **{f"{pkg}-grpo_no_std": (lambda pkg=pkg: healthy(pkg, "grpo", norm=False)) for pkg in PACKAGES},
    **{f"{pkg}-rloo": (lambda pkg=pkg: healthy(pkg, "rloo")) for pkg in PACKAGES},
    "skyrl-grpo_epsilon": lambda: healthy("skyrl", "grpo", epsilon=1e-3),
    "skyrl-maxrl": lambda: healthy("skyrl", "maxrl"),
    "skyrl-maxrl_epsilon": lambda: healthy("skyrl", "maxrl", epsilon=1e-3),
    "skyrl-reinforce++": lambda: healthy("skyrl", "reinforce++"),
    **{f"{pkg}-reinforce++_unpadded": (lambda pkg=pkg: healthy(pkg, "reinforce++", pad=0)) for pkg in PACKAGES},
    "reinforce++_discounted": lambda: healthy("skyrl", "reinforce++", pad=0, gamma=0.9),
    "reinforce++_broken": broken_reinforce_plus_plus,
    **{f"{pkg}-broken_batch_std": (lambda pkg=pkg: broken_batch_std(pkg)) for pkg in PACKAGES},
    "estimator_changes": estimator_changes,
    **{f"mine-{v}": (lambda v=v: my_estimator(v)) for v in ("healthy", "misaligned", "wrong_slice",
                                                              "swapped_branch")},
    "detach_restores": detach_restores,
    **{f"{pkg}-rloo_direct-{kind}": (lambda pkg=pkg, kind=kind: rloo_direct(pkg, kind)) for pkg in PACKAGES
       for kind in ("binary", "continuous", "graded")},
}

if __name__ == "__main__":
    run(CASES, sys.argv[1:])
