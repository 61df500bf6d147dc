"""OpenRLHF's real ``RemoteExperienceMaker.compute_advantages_and_returns`` with grpo-monitor attached.

Run in the OpenRLHF venv: ``python openrlhf_cases.py [CASE ...]``; prints ``GRPO_CASES {json}``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

from _cases import config_kwargs, outcome_batch, reference_error, run, summary
from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.integrations import openrlhf as gor
from grpo_monitor.integrations._common import row_advantages

gor.stub_gpu_modules()
em = gor.import_experience_maker()
from openrlhf.trainer.ppo_utils.experience import Experience  # noqa: E402
from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController  # noqa: E402
from openrlhf.utils.config import hierarchize  # noqa: E402

G, T, GROUPS, MICRO = 4, 6, 4, 5
Maker = em.RemoteExperienceMaker


def make_args(estimator: str, use_loss: bool = True, no_std_norm: bool = False) -> SimpleNamespace:
    """OpenRLHF's args as its CLI builds them (``hierarchize`` of the dotted argparse names)."""
    flat = {"algo.advantage.estimator": estimator, "algo.advantage.no_std_norm": no_std_norm,
            "algo.advantage.gamma": 1.0, "algo.advantage.lambd": 1.0, "algo.kl.use_loss": use_loss,
            "rollout.n_samples_per_prompt": G, "reward.clip_range": (-10.0, 10.0),
            "reward.overlong_buffer_len": None, "reward.stop_properly_penalty_coef": None}
    return hierarchize(argparse.Namespace(**flat))


def make_maker(estimator: str, cls: type = Maker, use_loss: bool = True, kl_coef: float = 0.01, **kw):
    args = make_args(estimator, use_loss, **kw)
    return cls(None, None, None, None, FixedKLController(kl_coef), SimpleNamespace(args=args), None)


def experiences(use_loss: bool = True, seed: int = 0) -> list:
    """A rollout of GROUPS x G responses in shuffled micro-batches of MICRO rows, each padded to its own length."""
    scores, lengths, mask, perm = outcome_batch(GROUPS, G, T, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    logp = -torch.rand(len(scores), T, generator=gen)
    ref = logp + 0.1 * torch.randn(len(scores), T, generator=gen)
    out = []
    for rows in perm.split(MICRO):
        width = int(lengths[rows].max())
        m = mask[rows, :width]
        k1 = (logp[rows, :width] - ref[rows, :width]) * m
        out.append(Experience(
            action_mask=m.bool(), rewards=scores[rows].clone(), index=rows.tolist(), response_length=lengths[rows],
            action_log_probs=logp[rows, :width], base_action_log_probs=ref[rows, :width] if use_loss else None,
            kl=torch.zeros_like(k1) if use_loss else k1, values=torch.zeros_like(k1), info={}))
    return out


def real_rows(exps: list, kl: list | None = None, kl_coef: float = 0.0):
    """Rewards, group ids, row advantages (the outcome part) and lengths in prompt order, from the real output."""
    index = torch.tensor([i for e in exps for i in e.index])
    mask = [e.action_mask.double() for e in exps]
    kl = kl or [None] * len(exps)
    adv = [gor._outcome_part(e.advantages, m, k, kl_coef) for e, m, k in zip(exps, mask, kl, strict=True)]
    rows = torch.cat([row_advantages(a, m) for a, m in zip(adv, mask, strict=True)])
    order = torch.argsort(index)
    rewards = torch.cat([e.rewards for e in exps])
    lengths = torch.cat([m.sum(-1) for m in mask])
    return rewards[order], index[order] // G, rows[order], lengths[order]


def healthy(estimator: str, use_loss: bool = True, kl_coef: float = 0.01) -> dict:
    maker = make_maker(estimator, use_loss=use_loss, kl_coef=kl_coef)
    exps = experiences(use_loss)
    kls = [e.kl for e in exps]
    att = gor.attach(config=MonitorConfig(**config_kwargs()))
    try:
        maker.compute_advantages_and_returns(exps)
        result = summary(att)
    finally:
        gor.detach()
    declared = gor.declared_estimator(maker.args).estimator
    if declared is not None and result.get("convention"):  # advantages were checked: compare with the registry
        result["reference_error"] = reference_error(declared, *real_rows(exps, kls, 0.0 if use_loss else kl_coef))
    return result


class PromptAxisStd(Maker):
    """A broken group_norm: the std is taken over the prompts (dim 0) instead of the group (dim -1)."""

    def compute_advantages_and_returns(self, experiences):
        n = self.args.rollout.n_samples_per_prompt
        index = torch.tensor([i for e in experiences for i in e.index])
        grid = torch.empty(len(index))
        grid[index] = torch.cat([e.rewards.float() for e in experiences])
        grid = grid.reshape(-1, n)
        z = ((grid - grid.mean(-1, keepdim=True)) / (grid.std(0, keepdim=True) + 1e-9)).reshape(-1)[index]
        for e, rows in zip(experiences, z.split([len(e.index) for e in experiences]), strict=True):
            e.advantages = rows[:, None] * e.action_mask
            e.returns = e.advantages.clone()
        return experiences


class PopulationStd(Maker):
    """A broken group_norm: the real method with population std (``unbiased=False``) where Bessel is declared."""

    def compute_advantages_and_returns(self, experiences):
        std = torch.Tensor.std
        torch.Tensor.std = lambda x, *a, **k: std(x, *a, **{**k, "unbiased": False})
        try:
            return super().compute_advantages_and_returns(experiences)
        finally:
            torch.Tensor.std = std


def broken(cls: type) -> dict:
    maker = make_maker("group_norm", cls)
    gor.attach(config=MonitorConfig(**config_kwargs()))
    try:
        maker.compute_advantages_and_returns(experiences())
        return {"raised": None}
    finally:
        gor.detach()


def outermost_only() -> dict:
    """A subclass calling super(): both methods are wrapped, one step is observed per call."""

    class Logged(Maker):
        def compute_advantages_and_returns(self, experiences):
            return super().compute_advantages_and_returns(experiences)

    att = gor.attach(config=MonitorConfig(**config_kwargs()))
    try:
        patched = sorted(p.owner.__name__ for p in att.patches)
        for seed in range(2):
            make_maker("group_norm", Logged).compute_advantages_and_returns(experiences(seed=seed))
        return {"patched": patched, **summary(att)}
    finally:
        gor.detach()
        del Logged


def detach_restores() -> dict:
    before = {c: c.__dict__.get("compute_advantages_and_returns") for c in (Maker, PromptAxisStd, PopulationStd)}
    mon = GRPOMonitor(MonitorConfig(**config_kwargs()))
    gor.attach(mon)
    wrapped = all(c.__dict__["compute_advantages_and_returns"] is not f for c, f in before.items())
    try:
        gor.attach(mon)
        twice = None
    except RuntimeError as exc:
        twice = str(exc)
    gor.detach()
    restored = all(c.__dict__.get("compute_advantages_and_returns") is f for c, f in before.items())
    return {"wrapped": wrapped, "restored": restored, "attach_twice": twice, "attached_after": gor.attached() is None,
            "monitor_open": not mon.closed}


def user_monitor() -> dict:
    """A monitor passed in is used as is (and not closed by detach)."""
    mon = GRPOMonitor(MonitorConfig(std_convention="bessel", stabilizer=1e-9, **config_kwargs()))
    att = gor.attach(mon, step_per_call=False)
    try:
        make_maker("group_norm").compute_advantages_and_returns(experiences())
        report = mon.end_step()
        return {"same": att.monitor is mon, "convention": report.convention, "reports": len(att.reports),
                "violations": [v.invariant for v in report.violations]}
    finally:
        gor.detach()


# ------------------------------------------------- the shipped default configuration
CLI = ("algo.advantage.estimator", "algo.kl.use_loss", "algo.kl.init_coef", "algo.advantage.gamma",
       "algo.advantage.lambd", "algo.advantage.no_std_norm")


def cli_defaults() -> dict:
    """The defaults OpenRLHF's own CLI declares (``openrlhf/cli/train_ppo_ray.py``, read from its source: the
    parser is built under ``if __name__ == "__main__"``)."""
    import ast
    import importlib.util

    origin = importlib.util.find_spec("openrlhf.cli.train_ppo_ray").origin
    found = {}
    for node in ast.walk(ast.parse(Path(origin).read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument" and node.args \
                and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).lstrip("-") in CLI:
            default = next((k.value for k in node.keywords if k.arg == "default"), None)
            found[str(node.args[0].value).lstrip("-")] = ast.literal_eval(default) if default is not None else None
    return found


def token_spread(exps: list, kls: list, kl_coef: float) -> float:
    """Max over rows of the spread of the outcome part over the row's tokens (0: the KL share fully removed)."""
    scale = gor.whitening_scale(exps)
    worst = 0.0
    for e, k in zip(exps, kls, strict=True):
        m = e.action_mask.double()
        out = gor._outcome_part(e.advantages, m, k, kl_coef * scale)
        hi = torch.where(m > 0, out, -torch.inf).max(-1).values
        lo = torch.where(m > 0, out, torch.inf).min(-1).values
        worst = max(worst, float((hi - lo).max()))
    return worst


def default_healthy(estimator: str | None = None) -> dict:
    """OpenRLHF's CLI defaults (KL in the reward, init_coef 0.01, gamma 1), ``estimator`` or the default one."""
    d = cli_defaults()
    est = estimator or d["algo.advantage.estimator"]
    maker = make_maker(est, use_loss=d["algo.kl.use_loss"], kl_coef=d["algo.kl.init_coef"],
                       no_std_norm=d["algo.advantage.no_std_norm"])
    exps = experiences(d["algo.kl.use_loss"])
    kls = [e.kl for e in exps]
    att = gor.attach(config=MonitorConfig(**config_kwargs()))
    try:
        maker.compute_advantages_and_returns(exps)
        result = summary(att)
    finally:
        gor.detach()
    result["defaults"] = d
    if result.get("convention"):
        result["token_spread"] = token_spread(exps, kls, d["algo.kl.init_coef"])
        result["kl_share"] = token_spread(exps, kls, 0.0)  # the raw token advantages' spread over a row
        if est not in gor.WHITENED:
            result["reference_error"] = reference_error(result["convention"], *real_rows(exps, kls,
                                                                                        d["algo.kl.init_coef"]))
    return result


class RolledAdvantages(Maker):
    """A broken maker: each micro-batch's advantages come back one row off their rewards."""

    def compute_advantages_and_returns(self, experiences):
        out = super().compute_advantages_and_returns(experiences)
        for e in out:
            e.advantages = torch.roll(e.advantages, 1, dims=0)
        return out


def default_broken(estimator: str, cls: type) -> dict:
    d = cli_defaults()
    maker = make_maker(estimator, cls, use_loss=d["algo.kl.use_loss"], kl_coef=d["algo.kl.init_coef"])
    gor.attach(config=MonitorConfig(**config_kwargs()))
    try:
        maker.compute_advantages_and_returns(experiences(d["algo.kl.use_loss"]))
        return {"raised": None}
    finally:
        gor.detach()


DEFAULT_CASES = {
    "default_gae": default_healthy,
    **{f"default_{est}": (lambda est=est: default_healthy(est)) for est in sorted(gor.ESTIMATORS)},
    "default_broken_population_std": lambda: default_broken("group_norm", PopulationStd),
    "default_broken_rolled_reinforce_baseline": lambda: default_broken("reinforce_baseline", RolledAdvantages),
    "default_broken_rolled_group_norm": lambda: default_broken("group_norm", RolledAdvantages),
}

CASES = {
    **DEFAULT_CASES,
    **{est: (lambda est=est: healthy(est)) for est in ("group_norm", "rloo", "dr_grpo", "reinforce_baseline")},
    "group_norm_kl_in_reward": lambda: healthy("group_norm", use_loss=False, kl_coef=0.05),
    "dr_grpo_kl_in_reward": lambda: healthy("dr_grpo", use_loss=False, kl_coef=0.05),
    "reinforce_baseline_kl_in_reward": lambda: healthy("reinforce_baseline", use_loss=False, kl_coef=0.05),
    "gae": lambda: healthy("gae"),
    "flash_reinforce": lambda: healthy("flash_reinforce"),
    "broken_prompt_axis_std": lambda: broken(PromptAxisStd),
    "broken_population_std": lambda: broken(PopulationStd),
    "outermost_only": outermost_only,
    "detach_restores": detach_restores,
    "user_monitor": user_monitor,
}

if __name__ == "__main__":
    run(CASES, sys.argv[1:])
