"""SkyRL (skyrl-train 0.3, skyrl 0.3): observe ``ppo_utils.compute_advantages_and_returns``.

SkyRL's trainer (``RayPPOTrainer.compute_advantages_and_returns``) calls its ``ppo_utils``
module's ``compute_advantages_and_returns(token_level_rewards, response_mask, index,
adv_estimator, config, grpo_norm_by_std, gamma, lambd, ...)`` once per training step;
that dispatcher calls ``AdvantageEstimatorRegistry.get(adv_estimator)``. Both packages
are covered: ``skyrl_train.utils.ppo_utils`` and ``skyrl.backends.skyrl_train.utils.ppo_utils``.
Rows are grouped by ``index`` (the ``uid`` of each prompt), rewards are
``token_level_rewards.sum(-1)``, the row advantage is the mean of the returned token
advantages over ``response_mask``. The rows SkyRL appends to fill its data-parallel
shards (``uid`` ``"pad0"``, ``"pad1"``, ... each alone in its group) are left out.

==========================================  ===============================================
``adv_estimator`` (``grpo_norm_by_std``)    registry entry
==========================================  ===============================================
``grpo`` (True, the default)                ``skyrl.grpo`` (Bessel + ``epsilon`` 1e-6)
``grpo`` (False)                            ``verl.grpo_no_std`` (the same code: r - mean)
``rloo``                                    ``leave_one_out``
``maxrl`` (skyrl)                           ``skyrl.maxrl``
``reinforce++`` (gamma 1, outcome reward)   ``skyrl.reinforce_plus_plus`` (no padding rows)
``reinforce++`` otherwise, ``gae``, custom  none: rewards and groups only
==========================================  ===============================================

``advantage_batch_normalize`` is applied by the trainer after the dispatcher returns; the
advantages observed are the estimator's. With ``use_kl_in_reward`` (off in SkyRL's
``ppo_base_config.yaml``) the trainer subtracts the KL from the token rewards before the
dispatcher, and SkyRL's ``grpo``/``rloo`` normalise the KL-shaped scores: the rewards observed
are those scores and the advantages are checked on them exactly. ``gae`` reads a learned
critic's values: rewards and groups only, said once. The sampler's side comes from the ``TrainingInputBatch``
the calling trainer method holds (:func:`find_training_input`, :func:`training_input_token_inputs`):
``rollout_logprobs`` against ``action_log_probs`` over ``loss_mask``, truncation at
``generator.sampling_params.max_generate_length`` for single-turn runs. SkyRL's trainer runs in a Ray task
(``skyrl_entrypoint``): call ``attach()`` in that process, e.g. with Ray's
``worker_process_setup_hook`` = ``"grpo_monitor.integrations.skyrl.attach_from_env"``, which
wraps the dispatcher when that process first imports ``ppo_utils`` (a hook must not import it:
its import creates SkyRL's registry actors).
``sinks="auto"`` follows ``trainer.logger`` (the run SkyRL's ``Tracking`` opened) and falls
back to ``<trainer.export_path>/grpo-monitor/monitor.jsonl``.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from grpo_monitor.config import MonitorConfig
from grpo_monitor.monitor import GRPOMonitor
from grpo_monitor.sinks.base import Sink
from grpo_monitor.step.calls import checked

from ._base import EntryPoint, entry_point_advice
from ._common import outcome_only, row_advantages
from ._entrypoint import Attachment, Call, Declared
from ._lookup import caller_first, module_references, trainer_setting

#: The ``ppo_utils`` modules holding the dispatcher, one per SkyRL package.
MODULES: tuple[str, ...] = ("skyrl_train.utils.ppo_utils", "skyrl.backends.skyrl_train.utils.ppo_utils")
DISPATCHER = "compute_advantages_and_returns"
#: SkyRL's ``adv_estimator`` -> registry entry (``grpo`` depends on ``grpo_norm_by_std``).
ESTIMATORS: dict[str, str] = {"rloo": "leave_one_out", "maxrl": "skyrl.maxrl"}
DEFAULT_EPSILON = 1e-6  # compute_grpo_outcome_advantage / compute_maxrl_advantage
_PAD_UID = re.compile(r"pad\d+")


class _SkyRL(EntryPoint):
    """The ``ppo_utils`` dispatcher of each importable SkyRL package, and every loaded module's copy of it.

    ``ppo_utils`` creates SkyRL's named ``RegistryActor`` at import time when Ray is initialized, which
    Ray's setup hook must not do (the worker aborts; :mod:`grpo_monitor.integrations._on_import`): so
    ``attach_from_env`` imports nothing of SkyRL and wraps the dispatcher when the trainer's code first
    imports ``ppo_utils`` (right away when it already is).
    """

    def load(self) -> Any:
        return import_ppo_utils()

    def install(self, state: Attachment, loaded: Any, **options: Any) -> None:
        for module in loaded:
            original = getattr(module, DISPATCHER)
            capture = _capturer(inspect.signature(original))
            for owner, attr in module_references(("skyrl_train", "skyrl"), original):
                state.patch(owner, attr, capture, self.observer(state))

    def observe(self, state: Attachment, monitor: GRPOMonitor, call: Call, out: Any) -> None:
        _observe(state, monitor, call, out)


INTEGRATION = _SkyRL("skyrl", on_import=MODULES, advice=entry_point_advice("uid", {
    "grpo/kl/": "the SkyRL integration observes the advantage dispatcher only; call "
                "monitor.observe_loss(mask=..., logprobs=..., ref_logprobs=...) in your policy loss",
}))
attach_from_env, detach, attached = INTEGRATION.attach_from_env, INTEGRATION.detach, INTEGRATION.attached


def allow_python311() -> bool:
    """Let ``skyrl`` import on Python 3.11: ``typing.TypedDict = typing_extensions.TypedDict``.

    skyrl's pydantic configs use ``typing.TypedDict``, which pydantic rejects below 3.12.
    This is what SkyRL itself needs on 3.11, not the monitor; call it before importing
    ``skyrl``. Returns whether ``typing`` was patched (False on 3.12+).
    """
    if sys.version_info >= (3, 12):
        return False
    import typing

    import typing_extensions

    typing.TypedDict = typing_extensions.TypedDict
    return True


def declared_estimator(adv_estimator: Any, grpo_norm_by_std: bool = True, epsilon: float | None = None, *,
                       gamma: float = 1.0, outcome_only: bool = True, padded: bool = False) -> Declared:
    """The registry entry of one SkyRL dispatcher call.

    ``gamma``, ``outcome_only`` (every token reward but the last valid one is 0) and ``padded``
    (the call holds SkyRL's data-parallel padding rows) decide whether ``reinforce++``'s batch
    whitening of the returns is one the registry replays (:func:`reinforce_plus_plus`).

    >>> declared_estimator("grpo").estimator, declared_estimator("grpo", False).estimator
    ('skyrl.grpo', 'verl.grpo_no_std')
    """
    name = str(getattr(adv_estimator, "value", adv_estimator))
    if name == "reinforce++":
        return reinforce_plus_plus(gamma, outcome_only, padded)
    eps = None if epsilon is None or float(epsilon) == DEFAULT_EPSILON else float(epsilon)
    if name == "grpo":
        return Declared("skyrl.grpo", stabilizer=eps) if grpo_norm_by_std else Declared("verl.grpo_no_std")
    if name in ESTIMATORS:
        return Declared(ESTIMATORS[name], stabilizer=eps if name == "maxrl" else None)
    if name == "gae":
        return Declared(None, note="SkyRL's 'gae' reads a learned critic's values, which no registry entry holds: its "
                                   "advantages are not group-relative")
    return Declared(None, note=f"SkyRL's advantage estimator {name!r} is not group-relative or not in the registry")


def reinforce_plus_plus(gamma: float, outcome_only: bool, padded: bool) -> Declared:
    """SkyRL's ``reinforce++``: the returns whitened over the batch's tokens, no group baseline.

    With ``gamma`` 1 and the reward on the last token only, a row's return is its reward on every
    token, so the advantages are ``skyrl.reinforce_plus_plus`` of the rewards, weighted by token
    counts. A discount, a reward on every token (``use_kl_in_reward``) or padding rows (SkyRL
    whitens over them too, and the monitor leaves them out) give advantages no entry holds.

    >>> reinforce_plus_plus(1.0, True, False).estimator, reinforce_plus_plus(0.99, True, False).estimator
    ('skyrl.reinforce_plus_plus', None)
    """
    why = ("gamma < 1 discounts each row's return over its tokens" if float(gamma) != 1.0 else
           "a reward on every token (e.g. use_kl_in_reward) gives each token its own return" if not outcome_only else
           "SkyRL whitens over its data-parallel padding rows too, which the monitor leaves out" if padded else "")
    if why:
        return Declared(None, note=f"SkyRL's 'reinforce++' whitens returns over the batch, and here {why}: no "
                                   "registry entry holds these advantages")
    return Declared("skyrl.reinforce_plus_plus")


@checked
def attach(monitor: GRPOMonitor | None = None, *, config: MonitorConfig | None = None,
           sinks: Sequence[Sink | str] | str | None = "auto", step_per_call: bool = True) -> Attachment:
    """Observe every call of SkyRL's ``ppo_utils.compute_advantages_and_returns``.

    Wraps the dispatcher in each importable SkyRL package and every loaded copy of it
    (``from ppo_utils import compute_advantages_and_returns``). Without ``monitor`` one is
    built at the first call from that call's estimator (:func:`declared_estimator`; fields
    set in ``config`` win). With ``step_per_call`` every call is one monitor step.
    Raises ``ImportError`` when no SkyRL package imports, ``RuntimeError`` when attached.
    """
    return INTEGRATION.attach(monitor, config=config, sinks=sinks, step_per_call=step_per_call)


def with_trackers(declared: Declared, trainer_cfg: Any) -> Declared:
    """``declared`` with SkyRL's ``trainer.logger`` and ``trainer.export_path`` (for ``sinks="auto"``)."""
    if trainer_cfg is None:
        return declared
    from grpo_monitor.sinks.auto import tracker_names

    get = trainer_cfg.get if hasattr(trainer_cfg, "get") else lambda k, d=None: getattr(trainer_cfg, k, d)
    out = get("export_path", None)
    return dataclasses.replace(declared, trackers=tuple(tracker_names(get("logger", None))),
                               output_dir=str(out) if out else None)


def import_ppo_utils() -> list[Any]:
    """Every SkyRL ``ppo_utils`` module that imports (already imported ones first)."""
    found, errors = [], []
    for name in MODULES:
        if name not in sys.modules and importlib.util.find_spec(name.split(".")[0]) is None:
            continue
        try:
            found.append(importlib.import_module(name))
        except Exception as exc:  # e.g. skyrl on Python 3.11 without allow_python311()
            errors.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    if not found:
        detail = "; ".join(errors) or "neither skyrl-train nor skyrl is installed"
        raise ImportError(f"no SkyRL ppo_utils module could be imported ({detail}); on Python 3.11 call "
                          "grpo_monitor.integrations.skyrl.allow_python311() before importing skyrl")
    return found


# ------------------------------------------------------------------ the call
def _capturer(signature: inspect.Signature):
    def capture(*args: Any, **kwargs: Any) -> Call:
        bound = signature.bind_partial(*args, **kwargs).arguments
        extra = bound.get("kwargs", {})
        rewards, mask = bound["token_level_rewards"], bound["response_mask"]
        declared = declared_estimator(bound["adv_estimator"], bound.get("grpo_norm_by_std", True), extra.get("epsilon"),
                                      gamma=bound.get("gamma", 1.0), outcome_only=outcome_only(rewards, mask),
                                      padded=not _real_rows(bound["index"]).all())
        declared = with_trackers(declared, trainer_setting(("cfg", "trainer")))
        return Call(declared, {"rewards": bound["token_level_rewards"], "mask": bound["response_mask"],
                               "index": bound["index"], "sampler": _sampler_capture(bound["response_mask"])})

    return capture


def _observe(state: Attachment, monitor: GRPOMonitor, call: Call, out: Any) -> None:
    mask, index = call.before["mask"], call.before["index"]
    keep = _real_rows(index)
    rewards = call.before["rewards"].sum(-1)
    advantages = out[0] if isinstance(out, tuple) else out
    check = state.checks_advantages(call)
    ids = [index[i] for i in np.flatnonzero(keep)]
    sel = torch.from_numpy(keep).to(rewards.device)
    m = mask[sel]
    tokens = _sampler_inputs(call.before.get("sampler"), sel, m)
    monitor.observe_rollout(rewards[sel], group_ids=ids, lengths=m.sum(-1),
                            advantages=row_advantages(advantages[sel], m) if check else None, **tokens["rollout"])
    monitor.observe_loss(**{"mask": m, **tokens["loss"]}, advantages=advantages[sel] if check else None)


def _real_rows(index: Any) -> np.ndarray:
    """Rows that are not SkyRL's data-parallel padding (uid ``padN``, alone in its group)."""
    ids = list(index.tolist() if hasattr(index, "tolist") else index)
    counts: dict[Any, int] = {}
    for uid in ids:
        counts[uid] = counts.get(uid, 0) + 1
    return np.array([not (isinstance(u, str) and _PAD_UID.fullmatch(u) and counts[u] == 1) for u in ids], dtype=bool)


# ------------------------------------------------------------ the sampler's side
#: ``TrainingInputBatch`` key -> ``observe_loss`` argument.
SAMPLER_KEYS: dict[str, str] = {"rollout_logprobs": "sampler_logprobs", "action_log_probs": "old_logprobs"}
_FRAMES = 12  # caller frames searched for the training batch (SkyRL's trainer method is one or two up)


def training_input_token_inputs(data: Any, max_generate_length: int | None = None
                                ) -> dict[str, dict[str, torch.Tensor]]:
    """The sampler's ``observe_loss`` and ``observe_rollout`` arguments a SkyRL ``TrainingInputBatch`` holds.

    Pure (no monitor, no copy): ``{"loss": {...}, "rollout": {...}}`` with ``mask`` = ``loss_mask``
    (the tokens SkyRL's policy loss averages over: 0 on environment observations and padding),
    ``sampler_logprobs`` = ``rollout_logprobs`` (the inference engine's, present when
    ``generator.sampling_params.logprobs`` is set), ``old_logprobs`` = ``action_log_probs`` (the
    policy's forward in ``fwd_logprobs_values_reward``); ``truncated`` = ``response_mask.sum(-1) >=
    max_generate_length`` when the limit is given. Absent tensors are left out.

    >>> d = {"response_mask": torch.tensor([[1, 1, 1], [1, 0, 0]]), "loss_mask": torch.tensor([[1, 1, 1], [1, 0, 0]])}
    >>> training_input_token_inputs(d, max_generate_length=3)["rollout"]["truncated"].tolist()
    [True, False]
    """
    if "response_mask" not in data:
        raise ValueError(f"data has no 'response_mask' (keys: {sorted(data.keys())}); pass SkyRL's TrainingInputBatch")
    present = {k: v for k, v in data.items() if v is not None}
    mask = present.get("loss_mask", data["response_mask"])
    loss = {"mask": mask, **{ours: present[theirs] for theirs, ours in SAMPLER_KEYS.items() if theirs in present}}
    rollout = {}
    if max_generate_length is not None:
        rollout["truncated"] = data["response_mask"].sum(-1) >= int(max_generate_length)
    return {"loss": loss, "rollout": rollout}


def find_training_input(response_mask: torch.Tensor, limit: int = _FRAMES) -> tuple[Any, Any] | None:
    """``(batch, rows)``: the ``TrainingInputBatch`` a caller up the stack holds whose rows are the dispatcher's.

    SkyRL's trainer calls the dispatcher with ``response_mask=data["response_mask"]`` (the same
    tensor: ``rows`` is None) or, for step-wise trajectories, ``data["response_mask"][is_last_step]``
    (``rows`` is ``is_last_step``); any other batch is not it. None when no caller holds one.
    """

    def batch(f_locals: dict[str, Any]) -> tuple[Any, Any] | None:
        for value in list(f_locals.values()):
            found, rows = _rows_of(value, response_mask)
            if found:
                return value, rows
        return None

    return caller_first(batch, limit)


def _rows_of(value: Any, response_mask: torch.Tensor) -> tuple[bool, Any]:
    """Whether ``value`` is the dispatcher's batch, and the rows of it the dispatcher got (None: all)."""
    if (not isinstance(value, dict) or not isinstance(value.get("response_mask"), torch.Tensor)
            or not any(isinstance(value.get(k), torch.Tensor) for k in ("loss_mask", *SAMPLER_KEYS))):
        return False, None  # not a training batch (e.g. the dispatcher's own keyword arguments)
    mask = value["response_mask"]
    if mask is response_mask:
        return True, None
    last = value.get("is_last_step")
    if (isinstance(last, torch.Tensor) and last.dtype == torch.bool and last.shape == mask.shape[:1]
            and mask.shape[1:] == response_mask.shape[1:] and int(last.sum()) == response_mask.shape[0]
            and torch.equal(mask[last], response_mask)):
        return True, last
    return False, None


def _sampler_capture(response_mask: torch.Tensor) -> dict[str, Any] | None:
    """Before the call: the trainer's training batch and the declared response-length limit (single-turn)."""
    found = find_training_input(response_mask)
    if found is None:
        return None
    generator = trainer_setting(("cfg", "generator"))
    turns = getattr(generator, "max_turns", None)
    limit = getattr(getattr(generator, "sampling_params", None), "max_generate_length", None)
    return {"batch": found[0], "rows": found[1], "max_generate_length": limit if turns == 1 else None}


def _sampler_inputs(captured: dict[str, Any] | None, sel: torch.Tensor, mask: torch.Tensor
                    ) -> dict[str, dict[str, torch.Tensor]]:
    """The training batch's token inputs for the dispatcher's real rows ``sel`` (its padding left out)."""
    if captured is None:
        return {"loss": {}, "rollout": {}}
    rows = captured["rows"]
    tokens = training_input_token_inputs(captured["batch"])
    loss = {k: (v if rows is None else v[rows])[sel] for k, v in tokens["loss"].items()}
    limit = captured["max_generate_length"]
    return {"loss": loss, "rollout": {} if limit is None else {"truncated": mask.sum(-1) >= int(limit)}}
