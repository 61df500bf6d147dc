"""verl 0.9.1: one monitor step per ``ray_trainer.compute_advantage`` call, where verl's trainer calls it.

verl's ``RayPPOTrainer.fit`` (in the driver-side ``TaskRunner`` actor under ``main_ppo``)
calls the module function ``ray_trainer.compute_advantage(data, adv_estimator, gamma, lam,
num_repeat, norm_adv_by_std_in_grpo, config)`` once per training step, before
``update_actor``; that dispatcher calls ``core_algos.compute_grpo_outcome_advantage`` for
``"grpo"`` and the registry entry ``core_algos.get_adv_estimator_fn(name)`` for the others.
:func:`attach` wraps the dispatcher (``ray_trainer.compute_advantage`` and the loaded
modules that imported it by name), so every estimator it dispatches to is observed,
entries registered after ``attach()`` included. After each call the ``DataProto`` holds
``token_level_rewards``, ``response_mask``, ``advantages`` and the ``uid`` of each row:
rewards are ``token_level_rewards.sum(-1)``, groups the ``uid`` strings (rows are
shuffled), the row advantage the mean over ``response_mask``; the monitor's step then ends,
so a breach raises ``InvariantViolation`` out of ``compute_advantage``, before
``update_actor`` uses the batch.

==================================================  =====================================
``adv_estimator`` (``norm_adv_by_std_in_grpo``)     registry entry
==================================================  =====================================
``grpo`` (True / False)                             ``verl.grpo`` / ``verl.grpo_no_std``
``grpo_vectorized`` (either)                        ``verl.grpo_vectorized`` (see below)
``rloo``, ``rloo_vectorized``                       ``verl.rloo``, ``verl.rloo_vectorized``
``grpo_passk`` (True / False, from the config)      ``verl.grpo_passk`` / ``verl.grpo_passk_no_std``
``gpg``, ``reinforce_plus_plus_baseline``           ``verl.gpg``, ``verl.reinforce_plus_plus_baseline``
``reinforce_plus_plus`` (gamma 1, outcome reward)   ``verl.reinforce_plus_plus``
``gae``, ``remax``, ...                             none: rewards and groups only
==================================================  =====================================

``compute_advantage`` passes ``norm_adv_by_std_in_grpo`` to ``grpo`` only; ``grpo_vectorized``
takes it as its own argument, which the dispatcher never passes, so it always divides by
the std, whatever ``algorithm.norm_adv_by_std_in_grpo`` says (verl 0.9.1). The attach
declares what is computed (``verl.grpo_vectorized``) and warns once when the config asks
for no std.

With ``algorithm.use_kl_in_reward`` (off in verl's ``ppo_trainer.yaml``) ``apply_kl_penalty``
subtracts the KL from the token rewards before ``compute_advantage``, and verl's group
estimators normalise the KL-shaped scores: the rewards observed are those scores, checked
exactly. ``gae``, the config's default, reads a learned critic: rewards and groups only, said once.

An estimator without an entry (a user's own) is checked against ``MonitorConfig.estimator``
when the user declares it (``attach(config=MonitorConfig(estimator="verl.grpo"))``).
``sinks="auto"`` follows ``trainer.logger`` (wandb, tensorboard, mlflow, trackio; the run
verl's ``Tracking`` opened) and falls back to ``<trainer.default_local_dir>/grpo-monitor/monitor.jsonl``.

KL, worker-side: ``kl_penalty`` (and the copies ``verl.workers.utils.losses`` and
``verl.trainer.distillation.losses`` hold) runs in the actor workers' loss, not in the
driver. ``attach(kl=True)`` wraps it for plain loops that call verl's functions in one
process; the response mask comes from ``with kl_mask(mask): ...`` or the caller's local
``response_mask``. Those token statistics join the monitor's current step (with one step
per ``compute_advantage``, the KL of an update is reported with the next step).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import inspect
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from grpo_monitor.config import MonitorConfig
from grpo_monitor.monitor import GRPOMonitor
from grpo_monitor.sinks.base import Sink
from grpo_monitor.step.calls import checked

from ._base import EntryPoint, entry_point_advice
from ._common import outcome_only, row_advantages
from ._entrypoint import Attachment, Call, Declared
from ._lookup import module_references, trainer_setting
from ._verl_audit import audit_data_metrics, data_metrics_exact, patch_data_metrics  # noqa: F401

MODULE = "verl.trainer.ppo.ray_trainer"
DISPATCHER = "compute_advantage"
KL_FUNCTIONS: tuple[str, ...] = ("kl_penalty", "kl_penalty_forward")
#: verl's ``adv_estimator`` -> (registry entry, entry when ``norm_adv_by_std_in_grpo`` is False).
ESTIMATORS: dict[str, tuple[str, str]] = {
    "grpo": ("verl.grpo", "verl.grpo_no_std"),
    "grpo_vectorized": ("verl.grpo_vectorized", "verl.grpo_no_std"),
    "rloo": ("verl.rloo", "verl.rloo"),
    "rloo_vectorized": ("verl.rloo_vectorized", "verl.rloo_vectorized"),
    "grpo_passk": ("verl.grpo_passk", "verl.grpo_passk_no_std"),
    "gpg": ("verl.gpg", "verl.gpg"),
    "reinforce_plus_plus_baseline": ("verl.reinforce_plus_plus_baseline", "verl.reinforce_plus_plus_baseline"),
}
#: Estimators that read ``norm_adv_by_std_in_grpo`` from the ``AlgoConfig`` (``grpo`` takes the call's argument;
#: ``grpo_vectorized`` has its own argument, which the dispatcher never passes: it always divides).
READS_CONFIG: tuple[str, ...] = ("grpo_passk",)

_KL_MASK: contextvars.ContextVar[torch.Tensor | None] = contextvars.ContextVar("grpo_monitor_kl_mask", default=None)
_IN_KL: contextvars.ContextVar[bool] = contextvars.ContextVar("grpo_monitor_in_kl", default=False)


class _Verl(EntryPoint):
    """``ray_trainer.compute_advantage`` and every loaded module's copy of it; ``kl_penalty``; the data metrics."""

    def load(self) -> Any:
        return importlib.import_module(MODULE)

    def install(self, state: Attachment, loaded: Any, kl: bool = True, **options: Any) -> None:
        original = getattr(loaded, DISPATCHER)
        wrapper = state.wrap(original, _capture, self.observer(state))
        for module, name in [(loaded, DISPATCHER)] + _copies(original, loaded):
            state.patch_with(module, name, wrapper)
        if kl:
            _patch_kl(state)
        patch_data_metrics(state)

    def observe(self, state: Attachment, monitor: GRPOMonitor, call: Call, out: Any) -> None:
        _observe(state, monitor, call, out)


INTEGRATION = _Verl("verl", advice=entry_point_advice("uid", {
    "grpo/mismatch/": "the rollout must return its log-probs: set actor_rollout_ref.rollout.calculate_log_probs=True "
                      "(default False), so the DataProto carries rollout_log_probs beside old_log_probs",
    "grpo/entropy/": "the verl integration sees the driver's DataProto, which holds no per-token entropies; call "
                     "monitor.observe_loss(mask=..., entropy=...) where the actor computes them",
    "grpo/weights/": "declare the actor's loss aggregation: MonitorConfig(group_size=n, "
                     "**grpo_monitor.integrations.verl.loss_config(cfg.actor_rollout_ref.actor)); to measure the "
                     "weights, call observe_loss(..., loss=) where agg_loss runs",
    "grpo/kl/": "set algorithm.use_kl_in_reward=True or actor_rollout_ref.actor.use_kl_loss=True; verl then calls "
                "kl_penalty, which the integration observes with the response mask",
    "grpo/adv/": "the integration checks verl's group-relative estimators (grpo, rloo, ...); this run used none of "
                 "them",
}))
attach_from_env, detach, attached = INTEGRATION.attach_from_env, INTEGRATION.detach, INTEGRATION.attached


def declared_estimator(adv_estimator: Any, norm_adv_by_std_in_grpo: bool = True, config: Any = None,
                       trainer: Any = None, *, gamma: float = 1.0, outcome_only: bool = True) -> Declared:
    """The registry entry of one ``compute_advantage`` call; ``trainer`` (the ``trainer`` section of the
    calling trainer's config) gives its trackers and output folder, for ``sinks="auto"``.

    ``grpo`` reads the call's ``norm_adv_by_std_in_grpo``; the other estimators read the
    ``AlgoConfig``'s (as verl's do). ``reinforce_plus_plus`` whitens each token's discounted
    return over the batch: with ``gamma`` 1 and ``outcome_only`` (every token reward but each
    row's last valid one is 0) a row's return is its reward on every token, which
    ``verl.reinforce_plus_plus`` replays; a discount or a reward on every token (the KL in
    the reward) gives advantages no entry holds.

    >>> declared_estimator("grpo").estimator, declared_estimator("grpo", False).estimator
    ('verl.grpo', 'verl.grpo_no_std')
    """
    name = str(getattr(adv_estimator, "value", adv_estimator))
    by_std = bool(norm_adv_by_std_in_grpo) if name == "grpo" else True
    if name in READS_CONFIG and config is not None and hasattr(config, "get"):
        by_std = bool(config.get("norm_adv_by_std_in_grpo", True))
    trackers, output_dir = _trackers(trainer)
    if name == "gae":
        return Declared(None, note="verl's 'gae' (the default adv_estimator) reads a learned critic's values, which "
                                   "no registry entry holds: its advantages are not group-relative",
                        trackers=trackers, output_dir=output_dir)
    if name == "reinforce_plus_plus":
        every_token = "a reward on every token (e.g. use_kl_in_reward) gives each token its own return"
        why = ("gamma < 1 discounts each row's return over its tokens" if float(gamma) != 1.0 else
               "" if outcome_only else every_token)
        if not why:
            return Declared("verl.reinforce_plus_plus", trackers=trackers, output_dir=output_dir)
        return Declared(None, note=f"verl's 'reinforce_plus_plus' whitens returns over the batch, and here {why}: "
                                   "no registry entry holds these advantages", trackers=trackers, output_dir=output_dir)
    if name not in ESTIMATORS:
        return Declared(None, note=f"verl's advantage estimator {name!r} has no registry entry",
                        trackers=trackers, output_dir=output_dir)
    return Declared(ESTIMATORS[name][0 if by_std else 1], trackers=trackers, output_dir=output_dir)


def _trackers(trainer: Any) -> tuple[tuple[str, ...] | None, str | None]:
    """``trainer.logger`` and ``trainer.default_local_dir`` of verl's trainer config (None when unknown)."""
    if trainer is None:
        return None, None
    from grpo_monitor.sinks.auto import tracker_names

    logger = trainer.get("logger", None) if hasattr(trainer, "get") else getattr(trainer, "logger", None)
    local_dir = trainer.get("default_local_dir", None) if hasattr(trainer, "get") else None
    return tuple(tracker_names(logger)), (str(local_dir) if local_dir else None)


def loss_config(actor: Any) -> dict[str, Any]:
    """``MonitorConfig`` fields declaring verl's loss aggregation from the actor's config
    (``actor_rollout_ref.actor``: ``loss_agg_mode``, ``loss_scale_factor``; a dict, an OmegaConf
    node or verl's ``ActorConfig``): ``MonitorConfig(group_size=n, **loss_config(cfg.actor_rollout_ref.actor))``.

    verl's driver holds no loss, so the driver-side weights are *derived* from the declared mode and
    ``response_mask`` (``grpo/weights/measured`` 0); to measure them, call
    ``observe_loss(..., loss=)`` in the actor where ``agg_loss`` runs. A fixed ``loss_scale_factor``
    under ``seq-mean-token-sum-norm`` is Dr. GRPO's constant normaliser.

    >>> loss_config({"loss_agg_mode": "seq-mean-token-sum-norm", "loss_scale_factor": 4096})
    {'loss_aggregation': 'constant_normalizer', 'loss_normalizer': 4096.0}
    """
    get = actor.get if hasattr(actor, "get") else lambda key, default=None: getattr(actor, key, default)
    mode = get("loss_agg_mode", "token-mean")
    scale = get("loss_scale_factor", None)
    if mode == "seq-mean-token-sum-norm" and scale is not None:
        return {"loss_aggregation": "constant_normalizer", "loss_normalizer": float(scale)}
    return {"loss_aggregation": f"verl.{mode}"}


@checked
def attach(monitor: GRPOMonitor | None = None, *, config: MonitorConfig | None = None,
           sinks: Sequence[Sink | str] | str | None = "auto", step_per_call: bool = True,
           kl: bool = True) -> Attachment:
    """Observe every call of verl's ``ray_trainer.compute_advantage``; one monitor step per call.

    Without ``monitor`` one is built at the first call, declared from the call's
    ``adv_estimator`` and ``norm_adv_by_std_in_grpo`` (fields set in ``config`` win), with
    ``sinks`` (``"auto"``: the trackers of ``trainer.logger``). ``kl`` also wraps
    ``kl_penalty`` (worker-side; for plain loops). Raises ``RuntimeError`` when already attached.
    """
    return INTEGRATION.attach(monitor, config=config, sinks=sinks, step_per_call=step_per_call, kl=kl)


def _copies(original: Callable, home: Any) -> list[tuple[Any, str]]:
    """Other loaded modules (verl's own, recipes) that imported ``compute_advantage`` by name."""
    return [(m, a) for m, a in module_references(("verl", "recipe"), original) if m is not home or a != DISPATCHER]


# ------------------------------------------------------------------ the call
def _capture(data: Any, adv_estimator: Any, gamma: float = 1.0, lam: float = 1.0, num_repeat: int = 1,
             norm_adv_by_std_in_grpo: bool = True, config: Any = None) -> Call:
    """Before the call: the declaration (with the calling trainer's config, for ``sinks="auto"``)."""
    trainer_section = trainer_setting(("config", "trainer"))  # RayPPOTrainer.config.trainer
    ignored = (str(getattr(adv_estimator, "value", adv_estimator)) == "grpo_vectorized" and config is not None
               and hasattr(config, "get") and not config.get("norm_adv_by_std_in_grpo", True))
    whitened = str(getattr(adv_estimator, "value", adv_estimator)) == "reinforce_plus_plus"
    outcome = (outcome_only(data.batch["token_level_rewards"], data.batch["response_mask"]) if whitened else True)
    return Call(declared_estimator(adv_estimator, norm_adv_by_std_in_grpo, config, trainer_section, gamma=gamma,
                                   outcome_only=outcome), {"std_flag_ignored": ignored})


def _observe(state: Attachment, monitor: GRPOMonitor, call: Call, data: Any) -> None:
    batch, extra = data.batch, data.non_tensor_batch
    if "uid" not in extra:
        state.warn_once("no_uid", "compute_advantage got a DataProto without non_tensor_batch['uid']: the rows' groups "
                                  "are unknown, this batch is not observed")
        return
    mask, advantages = batch["response_mask"], batch["advantages"]
    if call.before.get("std_flag_ignored"):
        state.warn_once("vectorized_std", "algorithm.norm_adv_by_std_in_grpo=False is ignored by verl's "
                                          "grpo_vectorized under compute_advantage (it divides by the std): the "
                                          "advantages are checked as verl.grpo_vectorized")
    check = state.checks_advantages(call)
    tokens = _token_inputs(data, mask)
    monitor.observe_rollout(batch["token_level_rewards"].sum(-1), group_ids=_ids(extra["uid"]),
                            advantages=row_advantages(advantages, mask) if check else None, **tokens["rollout"])
    # The token tensors this DataProto holds at advantage time (sampler vs. trainer log-probs, reference, entropy)
    monitor.observe_loss(**tokens["loss"], advantages=advantages if check else None)


def _token_inputs(data: Any, mask: torch.Tensor) -> dict[str, dict[str, torch.Tensor]]:
    """:func:`dataproto_token_inputs`, or the mask and lengths alone when the batch holds no ``responses``."""
    if "responses" in data.batch.keys():
        return dataproto_token_inputs(data)
    loss = {"mask": mask, "old_logprobs": _get(data.batch, "old_log_probs"),
            "ref_logprobs": _get(data.batch, "ref_log_prob")}
    return {"loss": {k: v for k, v in loss.items() if v is not None}, "rollout": {"lengths": mask.sum(-1)}}


def _get(batch: Any, key: str) -> torch.Tensor | None:
    return batch[key] if key in batch.keys() else None


def _ids(index: Any) -> Any:
    """verl's ``uid`` array (numpy object array of strings) as a list of hashable ids."""
    return index.tolist() if hasattr(index, "tolist") and not isinstance(index, torch.Tensor) else index


# ------------------------------------------------------------------------- KL
@contextlib.contextmanager
def kl_mask(mask: torch.Tensor) -> Iterator[None]:
    """Use ``mask`` as the response mask of the KL calls made inside the block."""
    token = _KL_MASK.set(mask)
    try:
        yield
    finally:
        _KL_MASK.reset(token)


def _patch_kl(state: Attachment) -> None:
    """Wrap ``core_algos.kl_penalty`` / ``kl_penalty_forward`` and every loaded verl module's copy of them."""
    from verl.trainer.ppo import core_algos

    for name in KL_FUNCTIONS:
        original = getattr(core_algos, name)
        wrapper = _wrap_kl(original, state)
        for module, attr in module_references(("verl",), original):
            state.patch_with(module, attr, wrapper)


def _wrap_kl(original: Callable, state: Attachment) -> Callable:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any):
        if _IN_KL.get():  # kl_penalty -> kl_penalty_forward: observed once, by the outer call
            return original(*args, **kwargs)
        token = _IN_KL.set(True)
        try:
            out = original(*args, **kwargs)
        finally:
            _IN_KL.reset(token)
        guard = state.guard
        if guard is not None:
            caller = sys._getframe(1)
            try:
                guard(_observe_kl, state, signature.bind_partial(*args, **kwargs).arguments, out, caller)
            finally:
                del caller
        return out

    wrapper.__grpo_monitor_original__ = original  # type: ignore[attr-defined]  # marks the wrapper for detach()
    return wrapper


def _observe_kl(state: Attachment, arguments: dict, kl: torch.Tensor, caller: Any) -> None:
    logprob, ref = arguments.get("logprob"), arguments.get("ref_logprob")
    if logprob is None or ref is None or kl is None or state.monitor is None:
        return
    mask = _KL_MASK.get()
    if mask is None:
        local = caller.f_locals.get("response_mask")
        mask = local if isinstance(local, torch.Tensor) and local.shape == logprob.shape else None
    if mask is None:
        state.warn_once("kl_mask", "verl's kl_penalty was called without a response mask in reach; wrap the call "
                                   "in grpo_monitor.integrations.verl.kl_mask(mask) to observe it")
        return
    state.monitor.observe_loss(mask=mask, logprobs=logprob, ref_logprobs=ref, kl=kl)


def dataproto_token_inputs(data: Any) -> dict[str, dict[str, torch.Tensor]]:
    """The ``observe_loss`` and ``observe_rollout`` arguments a driver-side verl ``DataProto`` holds.

    Pure (no monitor, no copy): ``{"loss": {...}, "rollout": {...}}`` with ``mask`` =
    ``response_mask`` (else the response part of ``attention_mask``, as verl's
    ``compute_response_mask``), ``sampler_logprobs`` = ``rollout_log_probs`` (the inference
    engine's), ``old_logprobs`` = ``old_log_probs``, ``ref_logprobs`` = ``ref_log_prob``,
    ``entropy`` = ``entropys`` when the batch still holds them, ``is_weights`` = ``rollout_is_weights`` (the
    rollout correction's importance weights the policy loss multiplies by); ``lengths`` = the response
    lengths and ``truncated`` = ``lengths == max_response_length``, verl's own
    ``response_length/clip_ratio`` test, with ``max_response_length`` the width of ``responses``.
    Absent tensors are left out, so ``monitor.observe_loss(**out["loss"])`` takes what there is.

    >>> from verl import DataProto
    >>> d = DataProto.from_dict({"responses": torch.zeros(2, 3, dtype=torch.long),
    ...                          "response_mask": torch.tensor([[1, 1, 1], [1, 0, 0]])})
    >>> dataproto_token_inputs(d)["rollout"]["truncated"].tolist()
    [True, False]
    """
    batch = data.batch
    keys = set(batch.keys())
    if "responses" not in keys:
        raise ValueError(f"data.batch has no 'responses' (keys: {sorted(keys)}); pass the driver-side DataProto "
                         "after generation")
    width = batch["responses"].shape[-1]
    if "response_mask" in keys:
        mask = batch["response_mask"]
    elif "attention_mask" in keys:
        mask = batch["attention_mask"][:, -width:]
    else:
        raise ValueError("data.batch has neither 'response_mask' nor 'attention_mask'; cannot tell valid tokens")
    names = {"rollout_log_probs": "sampler_logprobs", "old_log_probs": "old_logprobs", "ref_log_prob": "ref_logprobs",
             "entropys": "entropy", "rollout_is_weights": "is_weights"}
    loss = {"mask": mask, **{ours: batch[theirs] for theirs, ours in names.items() if theirs in keys}}
    lengths = mask.sum(-1)
    return {"loss": loss, "rollout": {"lengths": lengths, "truncated": lengths == width}}

