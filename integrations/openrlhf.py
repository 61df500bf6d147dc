"""OpenRLHF 0.11: observe ``RemoteExperienceMaker.compute_advantages_and_returns``.

OpenRLHF's single controller (the ``PPOTrainer`` Ray actor) turns each rollout into
``Experience`` micro-batches and calls ``experience_maker.compute_advantages_and_returns
(experiences)`` once per training step, before the PPO update. The method applies the
length penalties to ``experience.rewards`` in place, puts the rows back in prompt order
(``experience.index``: groups are ``index // n_samples_per_prompt``), shapes the rewards
by ``args.algo.advantage.estimator`` and writes ``experience.advantages`` ``(B, A)``:

============================  ==================================  =========================
estimator                     registry entry                      advantages
============================  ==================================  =========================
``group_norm``                ``openrlhf.group_norm``             Bessel std + 1e-9
``rloo``                      ``openrlhf.rloo``                   leave-one-out baseline
``dr_grpo``                   ``openrlhf.dr_grpo``                r - group mean
``reinforce_baseline``        ``openrlhf.reinforce_baseline``     then whitened over tokens
============================  ==================================  =========================

``gae``, ``reinforce``, ``flash_reinforce`` and ``reinforce_baseline`` with
``no_std_norm`` have no registry entry: rewards and groups are observed, advantages not.
With the KL penalty in the reward (``algo.kl.use_loss`` off, ``kl.init_coef > 0``: OpenRLHF's
defaults, ``cli/train_ppo_ray.py``) token advantages also carry the KL returns; the row
advantage checked is the outcome part (the advantage plus ``kl_coef`` times the KL summed
from each token to the end; for the whitened ``reinforce_baseline`` that sum is scaled by the
whitening's factor, read off the returns OpenRLHF keeps, and the outcome is then one global
affine map of the group step, fitted without token counts). ``gae`` (the CLI's default
estimator) reads a learned critic's values: rewards and groups only, said once.

The sampler's side (:func:`experience_sampler_inputs`, :func:`rollout_sampler_inputs`): vLLM's
``rollout_log_probs`` against ``action_log_probs`` per micro-batch, OpenRLHF's own
``Experience.truncated`` per row; absent tensors leave their family out.

:func:`attach` wraps the method on ``RemoteExperienceMaker`` and on every loaded subclass
that overrides it. The method runs in the ``PPOTrainer`` actor's process: call ``attach()``
there (``ray.init(runtime_env={"worker_process_setup_hook":
"grpo_monitor.integrations.openrlhf.attach_from_env", "env_vars": {"GRPO_MONITOR_CONFIG": ...}})``),
not only in the driver. ``sinks="auto"`` follows ``logger.wandb.key`` / ``logger.tensorboard_dir``
and falls back to ``<ckpt.output_dir>/grpo-monitor/monitor.jsonl``.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import types
from collections.abc import Sequence
from typing import Any

import torch

from grpo_monitor.config import MonitorConfig
from grpo_monitor.monitor import GRPOMonitor
from grpo_monitor.sinks.base import Sink
from grpo_monitor.step.calls import checked

from ._base import EntryPoint, entry_point_advice
from ._common import row_advantages
from ._entrypoint import Attachment, Call, Declared

#: OpenRLHF's ``args.algo.advantage.estimator`` -> registry entry.
ESTIMATORS: dict[str, str] = {
    "group_norm": "openrlhf.group_norm",
    "rloo": "openrlhf.rloo",
    "dr_grpo": "openrlhf.dr_grpo",
    "reinforce_baseline": "openrlhf.reinforce_baseline",
}
WHITENED = ("reinforce_baseline",)
MODULE = "openrlhf.trainer.ppo_utils.experience_maker"
METHOD = "compute_advantages_and_returns"
#: GPU-only modules ``experience_maker`` imports at load time, and the names it takes from them.
GPU_MODULES: dict[str, dict[str, Any]] = {
    "flash_attn": {}, "flash_attn.bert_padding": dict.fromkeys(("index_first_axis", "pad_input", "rearrange",
                                                                  "unpad_input")),
    "flash_attn.utils": {}, "flash_attn.utils.distributed": {"all_gather": None},
    "vllm": {"SamplingParams": None}, "vllm.inputs": {"TokensPrompt": None}, "vllm.utils": {"random_uuid": None},
}


class _OpenRLHF(EntryPoint):
    """``compute_advantages_and_returns`` on ``RemoteExperienceMaker`` and every loaded override."""

    def load(self) -> Any:
        return import_experience_maker().RemoteExperienceMaker

    def install(self, state: Attachment, loaded: Any, classes: Sequence[type] = (), **options: Any) -> None:
        state.patch_overrides(loaded, METHOD, classes, _capture, self.observer(state))

    def observe(self, state: Attachment, monitor: GRPOMonitor, call: Call, out: Any) -> None:
        _observe(state, monitor, call)


INTEGRATION = _OpenRLHF("openrlhf", advice=entry_point_advice("experience.index", {
    "grpo/kl/": "run with a reference model (--algo.kl.init_coef > 0 or --algo.kl.use_loss): the experience then "
                "carries base_action_log_probs",
}))
attach_from_env, detach, attached = INTEGRATION.attach_from_env, INTEGRATION.detach, INTEGRATION.attached


def stub_gpu_modules() -> list[str]:
    """Put empty stand-ins for ``flash_attn`` and ``vllm`` in ``sys.modules`` where they are not installed.

    OpenRLHF imports both when ``experience_maker`` loads; on a CPU machine (tests, the
    example) neither installs. An installed module is never replaced. Returns the names stubbed.
    """
    stubbed = []
    for name, attrs in GPU_MODULES.items():
        root = name.split(".")[0]
        if name in sys.modules or (root not in stubbed and importlib.util.find_spec(root) is not None):
            continue
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)  # find_spec() on it must not raise
        module.__grpo_monitor_stub__ = True  # type: ignore[attr-defined]  # marks our stand-in for detach
        for attr in attrs:
            setattr(module, attr, _unavailable(f"{name}.{attr}"))
        sys.modules[name] = module
        stubbed.append(name)
    return stubbed


def _unavailable(qualname: str):
    def missing(*args: Any, **kwargs: Any):
        raise RuntimeError(f"{qualname} is a grpo-monitor stand-in (stub_gpu_modules): not installed here")

    return missing


def declared_estimator(args: Any) -> Declared:
    """What OpenRLHF's ``args`` (the hierarchized CLI namespace) say its advantages are.

    >>> from types import SimpleNamespace as NS
    >>> args = NS(algo=NS(advantage=NS(estimator="group_norm", no_std_norm=False)),
    ...           rollout=NS(n_samples_per_prompt=8))
    >>> declared_estimator(args).estimator, declared_estimator(args).group_size
    ('openrlhf.group_norm', 8)
    """
    name = args.algo.advantage.estimator
    n = int(args.rollout.n_samples_per_prompt)
    group_size = n if n >= 2 else None
    if name in WHITENED and getattr(args.algo.advantage, "no_std_norm", False):
        return Declared(None, group_size=group_size,
                        note="OpenRLHF's reinforce_baseline with no_std_norm (token centring, no std) has no "
                             "registry entry")
    if name == "gae":
        return Declared(None, group_size=group_size,
                        note="OpenRLHF's 'gae' (the default estimator) reads a learned critic's values, which no "
                             "registry entry holds: its advantages are not group-relative")
    if name not in ESTIMATORS:
        return Declared(None, group_size=group_size,
                        note=f"OpenRLHF's advantage estimator {name!r} is not group-relative: no registry entry")
    return Declared(ESTIMATORS[name], group_size=group_size)


@checked
def attach(monitor: GRPOMonitor | None = None, *, config: MonitorConfig | None = None,
           sinks: Sequence[Sink | str] | str | None = "auto", step_per_call: bool = True,
           classes: Sequence[type] = ()) -> Attachment:
    """Observe every ``compute_advantages_and_returns`` of OpenRLHF's experience maker.

    Without ``monitor`` one is built at the first call from the maker's ``args``
    (:func:`declared_estimator`; fields set in ``config`` win) with ``sinks`` (``"auto"``:
    the W&B run active in the process, if any). With ``step_per_call`` every call is one
    monitor step. ``classes`` adds maker classes loaded later than the ones found now.
    Raises ``RuntimeError`` when already attached.
    """
    return INTEGRATION.attach(monitor, config=config, sinks=sinks, step_per_call=step_per_call, classes=classes)


def with_trackers(declared: Declared, args: Any) -> Declared:
    """``declared`` with OpenRLHF's trackers: ``logger.wandb.key`` set (W&B), ``logger.tensorboard_dir`` set
    (TensorBoard, in ``<tensorboard_dir>/<wandb.run_name>`` as OpenRLHF writes); output folder ``ckpt.output_dir``."""
    logger = getattr(args, "logger", None)
    wandb = getattr(logger, "wandb", None)
    tb = getattr(logger, "tensorboard_dir", None)
    trackers = (("wandb",) if getattr(wandb, "key", None) else ()) + (("tensorboard",) if tb else ())
    run_name = getattr(wandb, "run_name", None)
    out = getattr(getattr(args, "ckpt", None), "output_dir", None)
    return dataclasses.replace(declared, trackers=trackers, output_dir=str(out) if out else None,
                               tensorboard_dir=os.path.join(tb, run_name) if tb and run_name else tb)


def import_experience_maker() -> types.ModuleType:
    """``openrlhf.trainer.ppo_utils.experience_maker``, with a worded error when it cannot load."""
    try:
        return importlib.import_module(MODULE)
    except ImportError as exc:
        raise ImportError(f"cannot import {MODULE} ({exc}); expected openrlhf>=0.11 with its GPU dependencies "
                          "(flash_attn, vllm), or grpo_monitor.integrations.openrlhf.stub_gpu_modules() first on a "
                          "CPU machine") from exc


# ------------------------------------------------------------------ the call
def _capture(maker: Any, experiences: Sequence[Any], *args: Any, **kwargs: Any) -> Call:
    """Before the call: the declaration, the KL coefficient and each experience's ``kl`` (set to None by the call)."""
    margs = maker.strategy.args
    kl_coef = max(float(getattr(maker.kl_ctl, "value", 0.0)), 0.0)
    kls = [e.kl for e in experiences]
    kl_in_reward = not margs.algo.kl.use_loss and kl_coef > 0 and any(k is not None for k in kls)
    return Call(with_trackers(declared_estimator(margs), margs),
                {"kl": kls, "kl_coef": kl_coef, "kl_in_reward": kl_in_reward, "experiences": list(experiences)})


def _observe(state: Attachment, monitor: GRPOMonitor, call: Call) -> None:
    experiences, kls = call.before["experiences"], call.before["kl"]
    kl_coef = call.before["kl_coef"] if call.before["kl_in_reward"] else 0.0
    n = call.declared.group_size or 1
    check = state.checks_advantages(call)
    whitened_kl = bool(kl_coef) and call.declared.estimator in {ESTIMATORS[w] for w in WHITENED}
    scale = whitening_scale(experiences) if check and whitened_kl else 1.0
    rewards, index, rows, lengths = [], [], [], []
    for exp, kl in zip(experiences, kls, strict=True):
        mask = exp.action_mask.to(torch.float64)
        rewards.append(exp.rewards.reshape(-1))
        index.append(torch.as_tensor(exp.index, dtype=torch.long))
        lengths.append(mask.sum(-1))
        if check:
            rows.append(row_advantages(_outcome_part(exp.advantages, mask, kl, kl_coef * scale), mask))
    # A whitening of returns holding the KL has the KL's token mean and spread: the outcome part is one global
    # affine map of the group step, fitted without token counts (with them the replay would demand the exact
    # outcome-only whitening)
    monitor.observe_rollout(torch.cat(rewards), group_ids=torch.cat(index) // n,
                            advantages=torch.cat(rows) if check else None,
                            lengths=None if check and whitened_kl else torch.cat(lengths),
                            **rollout_sampler_inputs(experiences))
    for exp, kl in zip(experiences, kls, strict=True):
        monitor.observe_loss(mask=exp.action_mask.float(), logprobs=exp.action_log_probs,
                             ref_logprobs=exp.base_action_log_probs, kl=kl if kl_coef else None,
                             advantages=exp.advantages if check and not kl_coef else None,
                             **experience_sampler_inputs(exp))


def whitening_scale(experiences: Sequence[Any]) -> float:
    """The factor OpenRLHF's token whitening multiplied the returns by: the least-squares slope of
    ``experience.advantages`` on ``experience.returns`` (the returns it whitened, kept) over every valid token.

    ``reinforce_baseline`` whitens ``(advantages - mean) * rstd`` after the KL returns entered them, so the
    KL part of a token advantage is ``-rstd * kl_coef * sum_{s >= t} kl_s``. 1.0 when the returns do not vary.
    """
    adv, ret = [], []
    for exp in experiences:
        m = exp.action_mask.bool()
        adv.append(exp.advantages.to(torch.float64)[m])
        ret.append(exp.returns.to(torch.float64)[m])
    a, r = torch.cat(adv), torch.cat(ret)
    rc = r - r.mean()
    var = float((rc * rc).sum())
    return float((rc * (a - a.mean())).sum()) / var if var > 0 else 1.0


def _outcome_part(advantages: torch.Tensor, mask: torch.Tensor, kl: torch.Tensor | None,
                  kl_coef: float) -> torch.Tensor:
    """Token advantages less the KL returns ``-kl_coef * sum_{s >= t} kl_s`` (gamma is 1 for these estimators;
    ``kl_coef`` times :func:`whitening_scale` for a whitened estimator)."""
    adv = advantages.to(torch.float64)
    if not kl_coef or kl is None:
        return adv
    penalty = (kl.to(torch.float64) * mask).flip(-1).cumsum(-1).flip(-1)
    return adv + kl_coef * penalty


# ------------------------------------------------------------ the sampler's side
def experience_sampler_inputs(experience: Any) -> dict[str, torch.Tensor]:
    """The sampler's ``observe_loss`` arguments one OpenRLHF ``Experience`` holds: ``sampler_logprobs`` =
    ``rollout_log_probs`` (vLLM's, ``(B, A)`` aligned with ``action_mask``; OpenRLHF asks vLLM for them under
    ``--algo.advantage.is_correction_level token|seq``), or nothing when the experience has none.

    The trainer's side is ``action_log_probs`` (the actor's forward at the behaviour parameters, which
    OpenRLHF's loss uses as ``old_log_probs``), passed as ``logprobs``: ``grpo/mismatch/k1_mean`` is then
    OpenRLHF's own ``vllm_kl`` (``masked_mean(rollout_log_probs - old_log_probs)``). Pure, no copy.

    >>> from types import SimpleNamespace as NS
    >>> experience_sampler_inputs(NS(rollout_log_probs=None))
    {}
    """
    sampler = getattr(experience, "rollout_log_probs", None)
    return {} if sampler is None else {"sampler_logprobs": sampler}


def rollout_sampler_inputs(experiences: Sequence[Any]) -> dict[str, torch.Tensor]:
    """``truncated``: OpenRLHF's own per-row flag (``Experience.truncated``, vLLM's ``finish_reason ==
    "length"``, the flag behind its ``rollout/truncated_rate``), concatenated in the rollout's row order;
    nothing when any experience lacks it.

    >>> from types import SimpleNamespace as NS
    >>> rollout_sampler_inputs([NS(truncated=torch.tensor([True])), NS(truncated=torch.tensor([False, True]))])
    {'truncated': tensor([ True, False,  True])}
    """
    flags = [getattr(e, "truncated", None) for e in experiences]
    if not flags or any(f is None for f in flags):
        return {}
    return {"truncated": torch.cat([torch.as_tensor(f).reshape(-1).bool() for f in flags])}
