"""AReaL's real ``PPOActor._compute_advantages`` (``Normalization``, KL, GAE) with grpo-monitor attached.

Run in the AReaL venv: ``python areal_cases.py [CASE ...]``; prints ``GRPO_CASES {json}``.
"""

from __future__ import annotations

import logging
import sys

import torch
from areal.api.cli_args import NormConfig, PPOActorConfig
from areal.trainer.ppo.actor import PPOActor
from areal.utils.data import Normalization

from _cases import config_kwargs, outcome_batch, reference_error, run, scale_spread, summary
from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.integrations import areal as gar
from grpo_monitor.integrations._common import row_advantages

logging.disable(logging.INFO)  # PPOActor logs its configuration at construction
G, T, GROUPS, PROMPT = 4, 10, 4, 2
GROUP = dict(mean_level="group", std_level="group", group_size=G)
WHITEN = NormConfig(mean_level="batch", std_level="batch")
NORMS = {  # case -> (reward_norm, adv_norm)
    "grpo": (NormConfig(**GROUP), WHITEN),
    "dr_grpo": (NormConfig(**{**GROUP, "std_level": None}), WHITEN),
    "group_bessel": (NormConfig(**GROUP), None),
    "group_population": (NormConfig(**GROUP, std_unbiased=False), None),
    "group_mean": (NormConfig(**{**GROUP, "std_level": None}), None),
    "group_leave_one_out": (NormConfig(**{**GROUP, "std_level": None}, mean_leave1out=True), None),
    "group_mean_batch_std": (NormConfig(**{**GROUP, "std_level": "batch"}), None),
}


def actor(reward_norm, adv_norm, **kw) -> PPOActor:
    config = PPOActorConfig(experiment_name="grpo-monitor", trial_name="cases", path="/nonexistent",
                            reward_norm=reward_norm, adv_norm=adv_norm, **{"kl_ctl": 0.0, **kw})
    return PPOActor(config, engine=None)


def batch(seed: int = 0, ref: bool = False) -> dict:
    """AReaL's padded batch: prompt of PROMPT tokens, then the response; groups are contiguous rows."""
    scores, lengths, _, _ = outcome_batch(GROUPS, G, T - PROMPT - 1, seed)
    n = len(scores)
    seqlen = PROMPT + lengths
    pos = torch.arange(T)[None, :]
    gen = torch.Generator().manual_seed(seed + 1)
    logp = -torch.rand(n, T, generator=gen)
    data = {"input_ids": torch.zeros(n, T, dtype=torch.long), "rewards": scores,
            "attention_mask": (pos < seqlen[:, None]).long(),
            "loss_mask": ((pos >= PROMPT) & (pos < seqlen[:, None])).long(), "logprobs": logp}
    if ref:
        data["ref_logp"] = torch.roll(logp, -1, -1) + 0.1 * torch.randn(n, T, generator=gen)
    return data


def healthy(name: str, params: dict | None = None, ref: bool = False, **kw) -> dict:
    reward_norm, adv_norm = NORMS[name]
    a = actor(reward_norm, adv_norm, **kw)
    att = gar.attach(config=MonitorConfig(**config_kwargs()))
    try:
        out = a._compute_advantages(batch(ref=ref))
        result = summary(att)
    finally:
        gar.detach()
    declared = gar.declared_estimator(a.config)
    if declared.estimator is not None and result.get("convention"):
        mask = out["loss_mask"]
        if declared.stabilizer is not None:
            params = {"eps": declared.stabilizer, **(params or {})}
        rows = (out["rewards"], torch.arange(len(mask)) // G, row_advantages(out["advantages"], mask), mask.sum(-1))
        result["reference_error"] = reference_error(declared.estimator, *rows, **(params or {}))
        if declared.estimator == "batch":  # AReaL's batch std is the pooled within-group std: one other scale
            result["reference_scale_spread"] = scale_spread(declared.estimator, *rows)
    return result


def broken_batch_std() -> dict:
    """The config declares group std, the actor's Normalization divides by the batch's std."""
    a = actor(*NORMS["grpo"])
    a.reward_norm = Normalization(NormConfig(**{**GROUP, "std_level": "batch"}))
    gar.attach(config=MonitorConfig(**config_kwargs()))
    try:
        a._compute_advantages(batch())
        return {"raised": None}
    finally:
        gar.detach()


class PromptAxisMean(PPOActor):
    """A broken subclass: the group mean is taken across groups (position i of every group) before AReaL's code."""

    def _compute_advantages(self, data):
        r = data["rewards"].reshape(-1, G)
        data["rewards"] = (r - r.mean(0, keepdim=True)).reshape(-1)
        self.reward_norm = Normalization(NormConfig(mean_level=None, std_level=None, group_size=G))
        return super()._compute_advantages(data)


def broken_subclass() -> dict:
    a = PromptAxisMean(actor(*NORMS["group_mean"]).config, engine=None)
    gar.attach(config=MonitorConfig(**config_kwargs()))
    try:
        a._compute_advantages(batch())
        return {"raised": None}
    finally:
        gar.detach()


def detach_restores() -> dict:
    classes = (PPOActor, PromptAxisMean)
    before = {c: c.__dict__["_compute_advantages"] for c in classes}
    att = gar.attach(GRPOMonitor(MonitorConfig(**config_kwargs())))
    patched = sorted(p.owner.__name__ for p in att.patches)
    gar.detach()
    return {"patched": patched, "restored": all(c.__dict__["_compute_advantages"] is f for c, f in before.items())}


# ------------------------------------------------- the shipped default configuration
def shipped_defaults() -> dict:
    """``PPOActorConfig``'s own defaults for what shapes token rewards (areal/api/cli_args.py)."""
    import dataclasses

    fields = {f.name: f.default for f in dataclasses.fields(PPOActorConfig)}
    return {k: fields[k] for k in ("kl_ctl", "discount", "gae_lambda", "kl_estimator", "reward_norm", "adv_norm")}


def default_actor(name: str, **kw) -> PPOActor:
    """An actor on the dataclass defaults (kl_ctl 0.1, ...) but the GRPO normalisation ``name`` (NORMS) and ``kw``."""
    reward_norm, adv_norm = NORMS[name]
    config = PPOActorConfig(experiment_name="grpo-monitor", trial_name="cases", path="/nonexistent",
                            reward_norm=reward_norm, adv_norm=adv_norm, **kw)
    return PPOActor(config, engine=None)


def default_healthy(name: str, critic: bool = False, **kw) -> dict:
    """The default KL penalty (and ``kw``) on AReaL's real code, attached as a user would (nothing declared)."""
    a = default_actor(name, **kw)
    data = batch(ref=True)
    if critic:
        data["values"] = 0.1 * torch.randn(data["logprobs"].shape, generator=torch.Generator().manual_seed(5))
    att = gar.attach(config=MonitorConfig(**config_kwargs()))
    try:
        out = a._compute_advantages(data)
        result = summary(att)
    finally:
        gar.detach()
    result["defaults"] = shipped_defaults()
    result["config"] = {"kl_ctl": a.config.kl_ctl, "discount": a.config.discount, "gae_lambda": a.config.gae_lambda}
    valid = out["loss_mask"] > 0  # how far the KL (and discount) moved the valid tokens off the outcome part
    result["kl_share"] = float((out["advantages"] - gar.outcome_rows(a.config, out)[:, None])[valid].abs().max())
    declared = gar.declared_estimator(a.config).estimator
    if declared in ("bessel", "none", "leave_one_out") and result.get("convention"):
        rows = (out["rewards"], torch.arange(len(out["rewards"])) // G, gar.outcome_rows(a.config, out))
        eps = {"eps": a.config.reward_norm.eps} if declared == "bessel" else {}
        result["reference_error"] = reference_error(declared, *rows, **eps)
    return result


class RolledAdvantages(PPOActor):
    """A broken subclass: the advantages come back one row off their rewards (a misaligned gather)."""

    def _compute_advantages(self, data):
        out = super()._compute_advantages(data)
        out["advantages"] = torch.roll(out["advantages"], 1, dims=0)
        return out


def default_broken(kind: str) -> dict:
    """A defect under the default KL penalty: the batch's std where the group's is declared, or shuffled rows."""
    a = default_actor("grpo")
    if kind == "batch_std":
        a.reward_norm = Normalization(NormConfig(**{**GROUP, "std_level": "batch"}))
    if kind == "misaligned":
        a = RolledAdvantages(a.config, engine=None)
    data = batch(ref=True)
    gar.attach(config=MonitorConfig(**config_kwargs()))
    try:
        a._compute_advantages(data)
        return {"raised": None}
    finally:
        gar.detach()


DEFAULT_CASES = {
    "default_grpo": lambda: default_healthy("grpo"),
    "default_dr_grpo": lambda: default_healthy("dr_grpo"),
    "default_group_bessel": lambda: default_healthy("group_bessel"),
    "default_group_mean_discounted": lambda: default_healthy("group_mean", discount=0.9, gae_lambda=0.95),
    "default_grpo_discounted": lambda: default_healthy("grpo", discount=0.9),
    "default_critic": lambda: default_healthy("grpo", critic=True),
    "default_broken_batch_std": lambda: default_broken("batch_std"),
    "default_broken_misaligned": lambda: default_broken("misaligned"),
}

CASES = {
    **DEFAULT_CASES,
    **{name: (lambda name=name: healthy(name)) for name in NORMS},
    "grpo_scaled": lambda: healthy("grpo", {"reward_scaling": 2.0, "reward_bias": -0.5}, reward_scaling=2.0,
                                   reward_bias=-0.5),
    "grpo_overlong": lambda: healthy("grpo", overlong_reward_penalty=True, overlong_tokens=3,
                                     overlong_penalty_factor=0.5, max_new_tokens=T - PROMPT),
    "grpo_kl": lambda: healthy("grpo", ref=True, kl_ctl=0.1),
    "broken_batch_std": broken_batch_std,
    "broken_subclass": broken_subclass,
    "detach_restores": detach_restores,
}

if __name__ == "__main__":
    run(CASES, sys.argv[1:])
