"""AReaL 1.0: observe ``PPOActor._compute_advantages``.

AReaL's PPO actor computes a step's advantages in ``PPOActor._compute_advantages(data)``
(called through ``compute_advantages``, once per training step on every training
process): the rewards get the overlong penalty, ``(r + reward_bias) * reward_scaling``
clipped to ``reward_clip``, then ``reward_norm`` (:class:`areal.utils.data.Normalization`:
mean and std per group of ``group_size`` contiguous rows, per batch or none, optional
leave-one-out mean, float64); the KL to the reference is subtracted per token with
``kl_ctl``; GAE with ``discount`` and ``gae_lambda`` turns them into token advantages; and
``adv_norm`` optionally whitens those over the batch's tokens. Rewards are observed as the
normalisation sees them (scaled and clipped), rows grouped as ``reward_norm`` groups them,
the row advantage is the mean over ``loss_mask`` and ``lengths`` are its token counts.

=====================================================  ==============================
config (with ``kl_ctl=0``, ``discount=gae_lambda=1``)   registry entry
=====================================================  ==============================
reward_norm group/group, adv_norm batch/batch (Bessel)  ``areal.grpo``
reward_norm group mean only, adv_norm batch/batch        ``areal.dr_grpo``
reward_norm group/group, no adv_norm                     ``bessel`` / ``population`` + eps
reward_norm group mean only, no adv_norm                 ``none``
reward_norm group leave-one-out mean only, no adv_norm   ``leave_one_out``
reward_norm group mean + batch std, no adv_norm          ``batch``
=====================================================  ==============================

With the KL penalty in the token rewards (``kl_ctl``, 0.1 by default in ``PPOActorConfig``,
``areal/api/cli_args.py``) or a discount (``discount * gae_lambda`` below 1) and no critic,
the advantages checked are their outcome part (:func:`outcome_rows`): the advantage less the
KL-to-go AReaL's GAE makes of ``kl_rewards`` (discounted as it discounts, scaled by
``adv_norm``'s whitening factor read off ``returns``), averaged over the row's tokens, or
taken at its last token when discounted (where the outcome is undiscounted); the token
counts are then not passed (the whitening's mean and spread hold the KL). A learned critic
(``values`` in the batch) makes the advantages depend on it: rewards and groups only, said
once. Batch-level reward means and other combinations have no registry entry: rewards and
groups are observed, advantages not. With ``torch.distributed`` each process observes its
own rows (``rollout_scope="local"``; group ids carry the rank); token counts are then not
passed, since AReaL whitens over every process's tokens and the replay fits that affine map.

The sampler's side (:func:`logprob_inputs`, :func:`rollout_sampler_inputs`): the engine's
``logprobs`` (saved before the call overwrites them) against the trainer's ``prox_logp`` when it
was recomputed, truncation at ``max_new_tokens``; the decoupled (asynchronous) loss declares
``max_policy_lag`` (:func:`policy_lag`).

``sinks="auto"`` follows AReaL's own trackers, ``stats_logger`` of the experiment config
(read from the trainer calling ``compute_advantages``, e.g. ``PPOTrainer.config``; see
:func:`tracker_settings`): W&B (``wandb.mode`` not ``disabled``: the run AReaL's
``StatsLogger`` opened), Trackio (``trackio.mode``: AReaL's run), TensorBoard
(``tensorboard.path``: the same folder); SwanLab has no sink and is named once in a
warning; with none left, a JSONL log at ``<fileroot>/logs/<user>/<experiment>/<trial>/
grpo-monitor/monitor.jsonl`` (AReaL's log folder), its path printed. Without a trainer
config in reach (``PPOActor`` called directly, or a single-controller worker), an active,
enabled W&B run is followed (not the no-op run ``wandb.init(mode="disabled")`` leaves).
"""

from __future__ import annotations

import dataclasses
import getpass
import importlib
from collections.abc import Sequence
from typing import Any

import torch

from grpo_monitor.config import MonitorConfig
from grpo_monitor.monitor import GRPOMonitor
from grpo_monitor.sinks.base import Sink
from grpo_monitor.step.calls import checked
from grpo_monitor.step.distributed import rank_and_world

from ._base import EntryPoint, entry_point_advice
from ._common import row_advantages
from ._entrypoint import Attachment, Call, Declared
from ._lookup import trainer_setting

MODULE = "areal.trainer.ppo.actor"
METHOD = "_compute_advantages"
_ROWS_PER_RANK = 1 << 40  # group ids of rank k start at k << 40


class _AReaL(EntryPoint):
    """``PPOActor._compute_advantages`` on the class and every loaded override."""

    def load(self) -> Any:
        return importlib.import_module(MODULE).PPOActor

    def install(self, state: Attachment, loaded: Any, classes: Sequence[type] = (), **options: Any) -> None:
        state.patch_overrides(loaded, METHOD, classes, _capture, self.observer(state))

    def observe(self, state: Attachment, monitor: GRPOMonitor, call: Call, out: Any) -> None:
        _observe(state, monitor, call, out)


INTEGRATION = _AReaL("areal", advice=entry_point_advice("contiguous blocks of rows", {
    "grpo/kl/": "give the actor a reference model (the batch then carries ref_logp)",
}))
attach_from_env, detach, attached = INTEGRATION.attach_from_env, INTEGRATION.detach, INTEGRATION.attached


def _norm(cfg: Any) -> tuple | None:
    """A ``NormConfig`` as ``(mean_level, leave_one_out, std_level, unbiased, eps, group_size)``."""
    if cfg is None:
        return None
    return (cfg.mean_level, bool(cfg.mean_leave1out), cfg.std_level, bool(cfg.std_unbiased), float(cfg.eps),
            int(cfg.group_size))


def declared_estimator(config: Any) -> Declared:
    """What an AReaL ``PPOActorConfig`` says its advantages are (see the module's table).

    >>> from types import SimpleNamespace as NS
    >>> group = NS(mean_level="group", mean_leave1out=False, std_level="group", std_unbiased=True, eps=1e-5,
    ...            group_size=8)
    >>> batch = NS(mean_level="batch", mean_leave1out=False, std_level="batch", std_unbiased=True, eps=1e-5,
    ...            group_size=1)
    >>> d = declared_estimator(NS(reward_norm=group, adv_norm=batch, kl_ctl=0.1, discount=1.0, gae_lambda=1.0))
    >>> d.estimator, d.group_size
    ('areal.grpo', 8)
    """
    rn, an = _norm(config.reward_norm), _norm(config.adv_norm)
    if rn is None or rn[0] != "group" or rn[5] < 2:
        return Declared(None, note="AReaL without a group-level reward_norm mean (group_size >= 2) is not "
                                   "group-relative")
    g = rn[5]
    mean_level, loo, std_level, unbiased, eps, _ = rn
    if an is None:
        if std_level is None:
            return Declared("leave_one_out" if loo else "none", group_size=g)
        if loo:
            return Declared(None, group_size=g, note="AReaL's leave-one-out mean with a std has no registry entry")
        if std_level == "batch":
            return Declared("batch", group_size=g)
        return Declared("bessel" if unbiased else "population", stabilizer=eps, group_size=g)
    whitening = an[:4] == ("batch", False, "batch", True)
    if whitening and not loo and std_level == "group" and unbiased:
        return Declared("areal.grpo", group_size=g)
    if whitening and not loo and std_level is None:
        return Declared("areal.dr_grpo", group_size=g)
    return Declared(None, group_size=g, note=f"AReaL's reward_norm {rn[:4]} with adv_norm {an[:4]} has no registry "
                                             "entry")


@checked
def attach(monitor: GRPOMonitor | None = None, *, config: MonitorConfig | None = None,
           sinks: Sequence[Sink | str] | str | None = "auto", step_per_call: bool = True,
           classes: Sequence[type] = ()) -> Attachment:
    """Observe every ``PPOActor._compute_advantages`` (the class and every loaded subclass overriding it).

    Without ``monitor`` one is built at the first call from the actor's config
    (:func:`declared_estimator`; fields set in ``config`` win; ``rollout_scope="local"``).
    With ``step_per_call`` every call is one monitor step. Raises ``RuntimeError`` when attached.
    """
    return INTEGRATION.attach(monitor, config=config, sinks=sinks, step_per_call=step_per_call, classes=classes)


# ------------------------------------------------------------------ the call
def _capture(actor: Any, data: dict, *args: Any, **kwargs: Any) -> Call:
    """Before the call: the declaration (with the trainer's trackers; none with a learned critic), whether a
    reference log-prob came with the batch, and the log-probs the call overwrites (the inference engine's
    ``logprobs``, the trainer's ``prox_logp``)."""
    declared = declared_estimator(actor.config)
    if "values" in data and declared.estimator is not None:
        declared = Declared(None, group_size=declared.group_size,
                            note="AReaL's GAE with a learned critic (values in the batch) makes advantages depend on "
                                 "the critic, which no registry entry holds")
    declared = with_trackers(declared, trainer_setting(("config", "stats_logger")))
    declared = dataclasses.replace(declared, policy_lag=policy_lag(actor.config))
    return Call(declared, {"actor": actor, "has_ref": data.get("ref_logp") is not None,
                           "sampler": data.get("logprobs"), "trainer": data.get("prox_logp")})


def _observe(state: Attachment, monitor: GRPOMonitor, call: Call, out: dict) -> None:
    actor = call.before["actor"]
    mask = out["loss_mask"]
    rewards = torch.clip((out["rewards"] + actor.reward_bias) * actor.reward_scaling, min=-actor.reward_clip,
                         max=actor.reward_clip)
    check = state.checks_advantages(call)
    if check and actor.config.mask_no_eos_with_zero:
        attn = out["attention_mask"]
        if bool((attn.sum(-1) == attn.shape[1]).any()):
            state.warn_once("no_eos", "mask_no_eos_with_zero zeroes the reward of truncated rows after they entered "
                                      "the group statistics: advantages of such steps are not checked")
            check = False
    rank, world = rank_and_world()
    g = call.declared.group_size or 1
    gid = torch.arange(len(rewards), device=rewards.device) // g + rank * _ROWS_PER_RANK
    shaped = shapes_rewards(actor.config)
    lengths = mask.sum(-1) if world == 1 and not (check and shaped) else None
    advantages = out["advantages"]
    monitor.observe_rollout(rewards, group_ids=gid, lengths=lengths,
                            advantages=outcome_rows(actor.config, out) if check else None,
                            **rollout_sampler_inputs(actor.config, mask), **row_versions(actor, out))
    _check_lag(state, monitor, call.declared.policy_lag)
    kl = out["kl_rewards"] / -float(actor.kl_ctl) if float(actor.kl_ctl) != 0 else None
    monitor.observe_loss(mask=mask, **logprob_inputs(call.before, out),
                         advantages=advantages if check and not shaped else None,
                         ref_logprobs=out.get("ref_logp") if call.before["has_ref"] else None,
                         kl=kl if call.before["has_ref"] else None)


# ------------------------------------------------------------ the outcome part
def shapes_rewards(config: Any) -> bool:
    """Whether AReaL's token advantages carry more than the outcome: a KL penalty or a discount."""
    return float(config.kl_ctl) != 0.0 or float(config.discount) * float(config.gae_lambda) != 1.0


def outcome_rows(config: Any, out: dict) -> torch.Tensor:
    """One outcome advantage per row from AReaL's ``_compute_advantages`` output (no critic).

    AReaL's GAE with zero values is linear in the token rewards: the outcome reward at the last
    response token plus ``kl_rewards`` (zeroed at ``seqlens - 1``, as AReaL does). The KL's share
    is the same recursion run on ``kl_rewards`` alone, times ``adv_norm``'s factor (the slope of
    ``advantages`` on ``returns``, which AReaL keeps unwhitened). Undiscounted, the remainder is
    constant over a row (its mean is taken); discounted, it is taken at the last response token.
    """
    mask = out["loss_mask"].to(torch.float64)
    adv = out["advantages"].to(torch.float64)
    if not shapes_rewards(config):
        return row_advantages(adv, mask)
    gamma = float(config.discount) * float(config.gae_lambda)
    kl_part = _kl_to_go(out, mask, gamma) if float(config.kl_ctl) != 0.0 else torch.zeros_like(adv)
    outcome = adv - _whitening_factor(adv, out["returns"].to(torch.float64), mask) * kl_part
    if gamma == 1.0:
        return row_advantages(outcome, mask)
    last = (mask.shape[1] - 1 - mask.flip(-1).argmax(-1)).clamp(min=0)
    return outcome.gather(1, last[:, None]).squeeze(1)


def _kl_to_go(out: dict, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """AReaL's GAE recursion (values 0, ``gamma = discount * gae_lambda``) on the KL token rewards alone."""
    kl = out["kl_rewards"].to(torch.float64).clone()
    rows = torch.arange(kl.shape[0], device=kl.device)
    kl[rows, out["attention_mask"].sum(-1).long() - 1] = 0.0
    to_go = torch.zeros_like(kl)
    last = torch.zeros(kl.shape[0], dtype=torch.float64, device=kl.device)
    for t in reversed(range(kl.shape[1] - 1)):
        m = mask[:, t]
        last = last * (1 - m) + (kl[:, t] + gamma * last) * m
        to_go[:, t] = last
    return to_go


def _whitening_factor(adv: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """The slope of the advantages on the returns over valid tokens (1 without ``adv_norm``; 1 when flat)."""
    m = mask.bool()
    a, r = adv[m], returns[m]
    rc = r - r.mean()
    var = float((rc * rc).sum())
    return float((rc * (a - a.mean())).sum()) / var if var > 0 else 1.0


# ------------------------------------------------------------------ trackers
_UNSET = ("", "???")  # omegaconf's MISSING


def tracker_settings(stats_logger: Any) -> tuple[tuple[str, ...], str | None, str | None]:
    """``(trackers, output_dir, tensorboard_dir)`` of an AReaL ``StatsLoggerConfig``.

    ``trackers`` are those AReaL's ``StatsLogger`` logs to, in its order: ``wandb``,
    ``swanlab``, ``trackio`` when their ``mode`` is not ``"disabled"``, ``tensorboard`` when
    ``tensorboard.path`` is set. ``output_dir`` is ``StatsLogger.get_log_path``'s folder
    (``<fileroot>/logs/<user>/<experiment_name>/<trial_name>``; None when one is unset).

    >>> from types import SimpleNamespace as NS
    >>> off = NS(mode="disabled")
    >>> tracker_settings(NS(wandb=NS(mode="offline"), swanlab=NS(mode="local"), trackio=off,
    ...                     tensorboard=NS(path="/tb"), experiment_name="e", trial_name="t", fileroot=""))
    (('wandb', 'swanlab', 'tensorboard'), None, '/tb')
    """
    names = [name for name in ("wandb", "swanlab", "trackio")
             if str(getattr(getattr(stats_logger, name, None), "mode", "disabled")) != "disabled"]
    tensorboard = getattr(getattr(stats_logger, "tensorboard", None), "path", None)
    if tensorboard not in (None, *_UNSET):
        names.append("tensorboard")
    parts = [getattr(stats_logger, k, None) for k in ("fileroot", "experiment_name", "trial_name")]
    output = None if any(p is None or str(p) in _UNSET for p in parts) else \
        f"{parts[0]}/logs/{getpass.getuser()}/{parts[1]}/{parts[2]}"
    return tuple(names), output, (str(tensorboard) if "tensorboard" in names else None)


def with_trackers(declared: Declared, stats_logger: Any) -> Declared:
    """``declared`` with AReaL's trackers and log folder (for ``sinks="auto"``); unchanged without a config."""
    if stats_logger is None:
        return declared
    trackers, output_dir, tensorboard_dir = tracker_settings(stats_logger)
    return dataclasses.replace(declared, trackers=trackers, output_dir=output_dir, tensorboard_dir=tensorboard_dir)


# ------------------------------------------------------------ the sampler's side
def logprob_inputs(before: dict[str, Any], out: dict) -> dict[str, torch.Tensor]:
    """``observe_loss``'s log-prob arguments from one ``_compute_advantages`` call (no copy, no forward).

    When the trainer recomputed the log-probs (``prox_logp`` set before the call: ``recompute_logprob``
    or ``use_decoupled_loss`` with ``prox_logp_method`` recompute), ``logprobs`` = that ``prox_logp``
    (the policy at the parameters about to be updated) and ``sampler_logprobs`` = the inference
    engine's ``logprobs`` rolled by -1 as AReaL aligns them with the rolled ``loss_mask``. Without a
    recompute the batch holds no trainer log-probs: ``logprobs`` = the call's ``logprobs`` (the
    engine's) and no mismatch is measured.
    """
    trainer, sampler = before.get("trainer"), before.get("sampler")
    if trainer is None or sampler is None:
        return {"logprobs": out["logprobs"]}
    return {"logprobs": trainer, "sampler_logprobs": torch.roll(sampler, shifts=-1, dims=-1)}


def rollout_sampler_inputs(config: Any, loss_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """``truncated``: the response length (``loss_mask.sum(-1)``, as AReaL's overlong penalty counts it)
    at the actor's ``max_new_tokens``; nothing when the config has no limit.

    >>> from types import SimpleNamespace as NS
    >>> rollout_sampler_inputs(NS(max_new_tokens=2), torch.tensor([[0, 1, 1], [0, 1, 0]]))["truncated"].tolist()
    [True, False]
    """
    limit = getattr(config, "max_new_tokens", None)
    return {} if limit is None else {"truncated": loss_mask.sum(-1) >= int(limit)}


def row_versions(actor: Any, batch: dict) -> dict[str, Any]:
    """``policy_version`` / ``trained_version`` from AReaL's per-token ``versions`` (-1 on prompt tokens) and the
    actor's ``engine.get_version()``: a row's version is its oldest generated token's (AReaL's head
    offpolicyness, which ``max_head_offpolicyness`` bounds); a row without one counts as current. Nothing when
    either is missing.

    >>> from types import SimpleNamespace as NS
    >>> v = row_versions(NS(engine=NS(get_version=lambda: 7)), {"versions": torch.tensor([[-1, 5, 6], [-1, -1, -1]])})
    >>> v["policy_version"].tolist(), v["trained_version"]
    ([5, 7], 7)
    """
    versions, get_version = batch.get("versions"), getattr(getattr(actor, "engine", None), "get_version", None)
    if versions is None or not callable(get_version):
        return {}
    trained = int(get_version())
    top = torch.iinfo(torch.int64).max
    head = torch.where(versions >= 0, versions.long(), top).amin(-1)
    return {"policy_version": torch.where(head == top, trained, head), "trained_version": trained}


def policy_lag(config: Any) -> int | None:
    """The steps AReaL's sampler may lag its trainer by design: the trainer's ``rollout.max_head_offpolicyness``
    when a caller up the stack holds it (``PPOTrainer.config``); else 1 under ``use_decoupled_loss`` (asynchronous
    by design, staleness unknown), None otherwise (synchronous: the monitor's default, 0).

    >>> from types import SimpleNamespace as NS
    >>> policy_lag(NS(use_decoupled_loss=True)), policy_lag(NS(use_decoupled_loss=False))
    (1, None)
    """
    offpolicy = trainer_setting(("config", "rollout", "max_head_offpolicyness"))
    if isinstance(offpolicy, int) and not isinstance(offpolicy, bool):
        return max(int(offpolicy), 0)
    return 1 if getattr(config, "use_decoupled_loss", False) else None


def _check_lag(state: Attachment, monitor: GRPOMonitor, lag: int | None) -> None:
    """Warn once when the monitor allows less sampler lag than AReaL's config builds in (a monitor or
    ``max_policy_lag`` the user gave): a stale sampler's mismatch then raises as a defect."""
    if lag and monitor.config.max_policy_lag < lag:
        state.warn_once("policy_lag", f"AReaL's config lets the sampler lag the trainer by design (use_decoupled_loss "
                                      f"/ rollout.max_head_offpolicyness: {lag}) but the monitor declares "
                                      f"max_policy_lag={monitor.config.max_policy_lag}, so that lag's mismatch raises; "
                                      f"declare MonitorConfig(max_policy_lag={lag})")
