"""verl 0.9.1: observe the advantage and KL estimators where verl's trainer calls them.

verl's driver computes advantages in ``ray_trainer.compute_advantage``, which calls
``core_algos.compute_grpo_outcome_advantage`` as a module attribute for ``"grpo"`` and
``core_algos.get_adv_estimator_fn(name)`` (an entry of ``ADV_ESTIMATOR_REGISTRY``) for the
others. KL goes through ``core_algos.kl_penalty`` (which calls ``kl_penalty_forward``);
``verl.workers.utils.losses`` and ``verl.trainer.distillation.losses`` hold their own
``from core_algos import kl_penalty`` copies. :func:`attach` swaps each of these for a
wrapper that calls the original and hands its inputs and outputs to the monitor;
:func:`detach` puts the originals back, exactly. Copies made by modules imported after
``attach`` are not patched: import verl's trainer first.

Rows are shuffled in verl's batches: groups are read from the ``index`` (``uid``) array,
rewards from ``token_level_rewards.sum(-1)`` and the row advantage as the mean of the
returned token advantages over ``response_mask``. ``"grpo"`` divides by ``torch.std``
(Bessel) + 1e-6; ``norm_adv_by_std_in_grpo=False`` does not divide; ``"rloo"`` is the
leave-one-out convention. Each call declares its registry entry (``verl.grpo``,
``verl.grpo_no_std``, ``verl.rloo``, ... with the call's ``epsilon``) to a monitor built with
``std_convention="auto"``, so a branch that computes another convention is an error.

KL needs the response mask, which ``kl_penalty`` is not given: pass it with
``with kl_mask(response_mask): ...``, else it is read from the caller's local
``response_mask`` when its shape matches (both verl call sites have one); without a mask
the call is not observed (one warning).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import inspect
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from grpo_monitor.integrations._common import FailOpen, row_advantages
from grpo_monitor.monitor import GRPOMonitor

#: Estimators whose advantages are affine in the group's rewards (the invariants apply).
GROUP_ESTIMATORS: tuple[str, ...] = ("grpo", "grpo_vectorized", "rloo", "rloo_vectorized")
KL_FUNCTIONS: tuple[str, ...] = ("kl_penalty", "kl_penalty_forward")

_KL_MASK: contextvars.ContextVar[torch.Tensor | None] = contextvars.ContextVar("grpo_monitor_kl_mask", default=None)
_IN_KL: contextvars.ContextVar[bool] = contextvars.ContextVar("grpo_monitor_in_kl", default=False)


@dataclasses.dataclass
class _Patch:
    """One replaced reference: ``owner.name`` (an attribute) or ``owner[name]`` (a dict entry)."""

    owner: Any
    name: str
    original: Any
    item: bool = False

    def apply(self, value: Any) -> None:
        if self.item:
            self.owner[self.name] = value
        else:
            setattr(self.owner, self.name, value)

    def restore(self) -> None:
        self.apply(self.original)


@dataclasses.dataclass
class _Attachment:
    monitor: GRPOMonitor
    guard: FailOpen
    patches: list[_Patch]
    warned: set[str] = dataclasses.field(default_factory=set)
    declares: bool = True  # the monitor was built with std_convention="auto": each call declares its estimator


_current: _Attachment | None = None


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


def attached() -> GRPOMonitor | None:
    """The monitor verl's estimators currently report to, or None."""
    return _current.monitor if _current is not None else None


def attach(monitor: GRPOMonitor, *, estimators: Sequence[str] = GROUP_ESTIMATORS, kl: bool = True) -> None:
    """Wrap verl's advantage estimators named in ``estimators`` (and its KL estimator when ``kl``).

    Raises ``RuntimeError`` when already attached, ``ValueError`` for an unknown estimator.
    """
    global _current
    if not isinstance(monitor, GRPOMonitor):
        raise TypeError(f"monitor must be a GRPOMonitor, but got {type(monitor).__name__}")
    if _current is not None:
        raise RuntimeError("grpo_monitor.integrations.verl is already attached; call detach() first")
    from verl.trainer.ppo import core_algos

    registry = core_algos.ADV_ESTIMATOR_REGISTRY
    unknown = sorted(set(estimators) - set(registry))
    if unknown:
        raise ValueError(f"estimators {unknown} are not in verl's ADV_ESTIMATOR_REGISTRY; expected names from "
                         f"{sorted(registry)}")
    state = _Attachment(monitor, FailOpen(monitor, "verl"), [], declares=monitor.config.std_convention == "auto")
    originals = [registry[n] for n in estimators] + ([getattr(core_algos, n) for n in KL_FUNCTIONS] if kl else [])
    wrappers: dict[int, tuple[Callable, Callable]] = {}
    for fn in originals:
        wrap = _wrap_kl if fn.__name__ in KL_FUNCTIONS else _wrap_estimator
        wrappers.setdefault(id(fn), (fn, wrap(fn, state)))
    state.patches = [_Patch(registry, n, registry[n], item=True) for n in estimators] + _module_references(wrappers)
    for p in state.patches:
        p.apply(wrappers[id(p.original)][1])
    _current = state


def detach() -> None:
    """Restore every reference :func:`attach` replaced (no-op when not attached)."""
    global _current
    if _current is None:
        return
    for p in reversed(_current.patches):
        p.restore()
    _current = None


def _module_references(wrappers: dict[int, tuple[Callable, Callable]]) -> list[_Patch]:
    """Attributes of loaded ``verl`` modules (core_algos and its importers) bound to a wrapped function."""
    found = []
    for modname, module in list(sys.modules.items()):
        if module is None or not (modname == "verl" or modname.startswith("verl.")):
            continue
        for attr, value in list(vars(module).items()):
            if id(value) in wrappers and wrappers[id(value)][0] is value:
                found.append(_Patch(module, attr, value))
    return found


@contextlib.contextmanager
def kl_mask(mask: torch.Tensor) -> Iterator[None]:
    """Use ``mask`` as the response mask of the KL calls made inside the block."""
    token = _KL_MASK.set(mask)
    try:
        yield
    finally:
        _KL_MASK.reset(token)


# ------------------------------------------------------------------ estimators
def _wrap_estimator(original: Callable, state: _Attachment) -> Callable:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any):
        bound = signature.bind_partial(*args, **kwargs)
        out = original(*args, **kwargs)
        state.guard(_observe_estimator, state, original.__name__, bound.arguments, out)
        return out

    wrapper.__grpo_monitor_original__ = original  # type: ignore[attr-defined]  # marks the wrapper for detach()
    return wrapper


#: verl's estimator functions -> (registry entry, registry entry when norm_adv_by_std_in_grpo=False).
ESTIMATOR_OF_FUNCTION: dict[str, tuple[str, str]] = {
    "compute_grpo_outcome_advantage": ("verl.grpo", "verl.grpo_no_std"),
    "compute_grpo_vectorized_outcome_advantage": ("verl.grpo_vectorized", "verl.grpo_no_std"),
    "compute_rloo_outcome_advantage": ("verl.rloo", "verl.rloo"),
    "compute_rloo_vectorized_outcome_advantage": ("verl.rloo_vectorized", "verl.rloo_vectorized"),
}


def declared_estimator(name: str, arguments: dict) -> tuple[str, float | None] | None:
    """The registry entry and stabilizer a verl estimator call computes, from its own arguments
    (``norm_adv_by_std_in_grpo``, ``epsilon``); None for estimators verl's registry holds that the
    monitor does not know (a user's own: judged by "auto")."""
    entry = ESTIMATOR_OF_FUNCTION.get(name)
    if entry is None:
        return None
    by_std = arguments.get("norm_adv_by_std_in_grpo", True)
    config = arguments.get("config")
    if config is not None and hasattr(config, "get"):
        by_std = config.get("norm_adv_by_std_in_grpo", by_std)
    estimator = entry[0] if by_std else entry[1]
    divides = estimator in ("verl.grpo", "verl.grpo_vectorized")
    return estimator, float(arguments.get("epsilon", 1e-6)) if divides else None


def _observe_estimator(state: _Attachment, name: str, arguments: dict, out: Any) -> None:
    rewards, mask, index = (arguments.get(k) for k in ("token_level_rewards", "response_mask", "index"))
    if rewards is None or mask is None or index is None:
        _warn_once(state, name, f"verl estimator {name} was called without token_level_rewards, response_mask and "
                                "index (uid); its batch is not observed")
        return
    declared = declared_estimator(name, arguments)
    if declared is not None and state.declares:
        state.monitor.declare_estimator(*declared)
    advantages = out[0] if isinstance(out, tuple) else out
    state.monitor.observe_rollout(rewards.sum(-1), group_ids=_ids(index), advantages=row_advantages(advantages, mask))
    state.monitor.observe_loss(mask=mask, advantages=advantages)


def _ids(index: Any) -> Any:
    """verl's ``uid`` array (numpy object array of strings) as a list of hashable ids."""
    return index.tolist() if hasattr(index, "tolist") and not isinstance(index, torch.Tensor) else index


# ------------------------------------------------------------------------- KL
def _wrap_kl(original: Callable, state: _Attachment) -> Callable:
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
        bound = signature.bind_partial(*args, **kwargs).arguments
        caller = sys._getframe(1)
        try:
            state.guard(_observe_kl, state, bound, out, caller)
        finally:
            del caller
        return out

    wrapper.__grpo_monitor_original__ = original  # type: ignore[attr-defined]  # marks the wrapper for detach()
    return wrapper


def _observe_kl(state: _Attachment, arguments: dict, kl: torch.Tensor, caller: Any) -> None:
    logprob, ref = arguments.get("logprob"), arguments.get("ref_logprob")
    if logprob is None or ref is None or kl is None:
        return
    mask = _KL_MASK.get()
    if mask is None:
        local = caller.f_locals.get("response_mask")
        mask = local if isinstance(local, torch.Tensor) and local.shape == logprob.shape else None
    if mask is None:
        _warn_once(state, "kl_mask", "verl's kl_penalty was called without a response mask in reach; wrap the call "
                                     "in grpo_monitor.integrations.verl.kl_mask(mask) to observe it")
        return
    state.monitor.observe_loss(mask=mask, logprobs=logprob, ref_logprobs=ref, kl=kl)


def _warn_once(state: _Attachment, key: str, text: str) -> None:
    if key not in state.warned:
        state.warned.add(key)
        warnings.warn(f"grpo-monitor: {text}", RuntimeWarning, stacklevel=3)


def dataproto_token_inputs(data: Any) -> dict[str, dict[str, torch.Tensor]]:
    """The ``observe_loss`` and ``observe_rollout`` arguments a driver-side verl ``DataProto`` holds.

    Pure (no monitor, no copy): ``{"loss": {...}, "rollout": {...}}`` with ``mask`` =
    ``response_mask`` (else the response part of ``attention_mask``, as verl's
    ``compute_response_mask``), ``sampler_logprobs`` = ``rollout_log_probs`` (the inference
    engine's), ``old_logprobs`` = ``old_log_probs``, ``ref_logprobs`` = ``ref_log_prob``,
    ``entropy`` = ``entropys`` when the batch still holds them; ``lengths`` = the response
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
             "entropys": "entropy"}
    loss = {"mask": mask, **{ours: batch[theirs] for theirs, ours in names.items() if theirs in keys}}
    lengths = mask.sum(-1)
    return {"loss": loss, "rollout": {"lengths": lengths, "truncated": lengths == width}}
