"""What a TRL ``GRPOTrainer`` declares to the monitor: its config, its run-record settings, its reward.

:func:`config_from_trainer` reads the group size, the estimator of ``scale_rewards``, the clip
and the loss aggregation from the trainer; :func:`trl_rewards` is the reward TRL logs.
Re-exported by :mod:`grpo_monitor.integrations.trl`.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from grpo_monitor.config import MonitorConfig
from grpo_monitor.stats.aggregations import ALIASES

#: TRL's ``scale_rewards`` -> the registry entry (``grpo_monitor.ESTIMATORS``) it computes.
ESTIMATOR_OF_SCALE_REWARDS: dict[str, str] = {"group": "trl.group", "batch": "trl.batch", "none": "trl.none"}


def config_from_trainer(trainer: Any, config: MonitorConfig | None = None) -> MonitorConfig:
    """A ``MonitorConfig`` declaring what ``trainer`` does; fields set in ``config`` win.

    ``group_size`` = ``num_generations``, the registry estimator of ``scale_rewards``
    (``trl.group``: Bessel + 1e-4, ``trl.batch``, ``trl.none``; ``trl.normalize_then_sum`` under
    ``multi_objective_aggregation="normalize_then_sum"``), the PPO clip
    ``(epsilon_low, epsilon_high)``, no KL clamp, ``rollout_scope="global"``. Declaring the
    estimator makes a swapped branch an error instead of a silent "auto" match.
    """
    scale = getattr(trainer, "scale_rewards", None) or trainer.args.scale_rewards
    if scale not in ESTIMATOR_OF_SCALE_REWARDS:
        raise ValueError(f"trainer.scale_rewards must be one of {sorted(ESTIMATOR_OF_SCALE_REWARDS)}, "
                         f"but got {scale!r}")
    estimator = ESTIMATOR_OF_SCALE_REWARDS[scale]
    if getattr(trainer, "multi_objective_aggregation", "sum_then_normalize") == "normalize_then_sum":
        estimator = "trl.normalize_then_sum"
    derived = dict(
        group_size=int(trainer.num_generations), estimator=estimator, stabilizer=None,
        clip_range=clip_range(trainer), kl_clamp=None, rollout_scope="global", **loss_aggregation(trainer),
        **importance_mask(trainer),
    )
    if config is None:
        return MonitorConfig(**derived)
    for key in ("group_size", "rollout_scope"):
        if key in config.model_fields_set and getattr(config, key) != derived[key]:
            raise ValueError(
                f"config.{key}={getattr(config, key)!r} but the trainer needs {derived[key]!r} "
                f"(num_generations={trainer.num_generations}, rewards gathered on every process); leave it unset"
            )
    return config.model_copy(update={k: v for k, v in derived.items() if k not in config.model_fields_set})


def importance_mask(trainer: Any) -> dict[str, Any]:
    """``mismatch_mask`` and the band of TRL's masking vLLM importance correction (``vllm_importance_sampling_mode``
    ``token_mask`` / ``sequence_mask`` with ``vllm_importance_sampling_clip_{min,max}``; a clip_min of None is
    the smallest positive float, log -708); nothing under the truncate modes or without the correction."""
    mode = getattr(trainer, "vllm_importance_sampling_mode", None)
    if not (getattr(trainer, "use_vllm", False) and getattr(trainer, "vllm_importance_sampling_correction", False)
            and mode in ("token_mask", "sequence_mask")):
        return {}
    low = getattr(trainer, "vllm_importance_sampling_clip_min", None)
    high = getattr(trainer, "vllm_importance_sampling_clip_max", None)
    out: dict[str, Any] = {"mismatch_mask": mode.split("_")[0]}
    low = sys.float_info.min if low is None else float(low)
    if 0 < low < 1:
        out["mismatch_ratio_low"] = low
    if high is not None and float(high) > 1:
        out["mismatch_ratio_high"] = float(high)
    return out


def loss_aggregation(trainer: Any) -> dict[str, Any]:
    """``loss_aggregation`` (``trl.<loss_type>``) and, under ``dr_grpo``, ``loss_normalizer`` =
    ``max_completion_length``: what TRL documents for its ``loss_type``.

    Declared only where the reward term's weight is ``-A c`` at ratio 1: no entropy mask
    (``top_entropy_quantile`` 1), no off-policy mask, no vLLM importance weights, ``cispo``'s
    ``epsilon_high`` >= 1 (below 1 it clips the ratio 1 itself), and for the step-scoped
    ``dapo``/``cispo``/``vespo`` one process with ``steps_per_generation == gradient_accumulation_steps``
    (TRL's denominator is then the step's token count), and only for GRPOTrainer's own loss (a subclass
    that replaces it, as TRL's ``GMPOTrainer`` does, is :func:`replaced_loss`). Elsewhere ``"auto"``: fitted, not
    checked.
    """
    loss_type = getattr(trainer, "loss_type", None)
    args = trainer.args
    name = f"trl.{loss_type}"
    out: dict[str, Any] = {"loss_aggregation": "auto"}
    if name not in ALIASES or replaced_loss(trainer) is not None:
        return out
    vllm_weights = getattr(trainer, "use_vllm", False) and getattr(trainer, "vllm_importance_sampling_correction",
                                                                   False)
    masked = (float(getattr(trainer, "top_entropy_quantile", 1.0)) < 1.0
              or getattr(trainer, "off_policy_mask_threshold", None) is not None or vllm_weights
              or (loss_type == "cispo" and float(trainer.epsilon_high) < 1.0))
    step_scoped = ALIASES[name][1] == "step"
    spg = getattr(args, "steps_per_generation", None) or args.gradient_accumulation_steps
    if masked or (step_scoped and (trainer.accelerator.num_processes > 1 or spg != args.gradient_accumulation_steps)):
        return out
    out["loss_aggregation"] = name
    if loss_type == "dr_grpo":
        out["loss_normalizer"] = float(trainer.max_completion_length)
    return out


#: The methods that compute GRPOTrainer's loss: a subclass's override that never calls the parent's replaces it.
LOSS_METHODS = ("compute_loss", "_compute_loss")


def replaced_loss(trainer: Any) -> str | None:
    """The class and method of ``trainer`` that replace ``GRPOTrainer``'s loss (None: the stock loss runs).

    An override that calls ``super().<method>`` (code naming ``super`` and the method) keeps the stock loss for
    ``loss_type``; one that does not (TRL's ``GMPOTrainer._compute_loss``: a geometric mean of the ratios)
    computes another, so its aggregation is not ``trl.<loss_type>``'s.
    """
    try:
        from trl import GRPOTrainer
    except ImportError:  # not TRL's trainer: nothing to compare with
        return None
    for cls in type(trainer).__mro__:
        if cls is GRPOTrainer:
            break
        for method in LOSS_METHODS:
            fn = cls.__dict__.get(method)
            code = getattr(fn, "__code__", None)
            if fn is not None and (code is None or not {"super", method} <= set(code.co_names)):
                return f"{cls.__name__}.{method}"
    return None


def trl_rewards(rewards_per_func: torch.Tensor, weights: torch.Tensor, group_size: int,
                aggregation: str = "sum_then_normalize") -> torch.Tensor:
    """The ``(N,)`` rewards TRL logs as ``reward``: the weighted ``nansum`` of the reward functions,
    NaN on unscorable rows (every function gave None).

    Under ``normalize_then_sum`` TRL's advantages come from per-function z-scores, not from
    this sum; the declared estimator ``trl.normalize_then_sum`` promises only what holds for
    it (zero group mean, unscorable rows at 0), so the monitor checks those and reports the
    reward users compare with TRL's log.

    >>> trl_rewards(torch.tensor([[1., float("nan")], [float("nan")] * 2]), torch.tensor([1., 2.]), 2).tolist()
    [1.0, nan]
    """
    if aggregation not in ("sum_then_normalize", "normalize_then_sum"):
        raise ValueError(f"multi_objective_aggregation must be 'sum_then_normalize' or 'normalize_then_sum', "
                         f"but got {aggregation!r}")
    w = weights.to(rewards_per_func.device, rewards_per_func.dtype).unsqueeze(0)
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    return torch.where(unscorable, torch.nan, (rewards_per_func * w).nansum(dim=1))


def clip_range(trainer: Any) -> tuple[float, float]:
    """The monitor's ``clip_range`` (low, high) for TRL's loss: ratio outside [1 - low, 1 + high] is clipped.

    ``cispo`` clips the ratio at ``epsilon_high`` itself (no lower bound): (1, epsilon_high - 1).
    """
    if getattr(trainer, "loss_type", None) == "cispo":
        return 1.0, max(float(trainer.epsilon_high) - 1.0, 0.0)
    return float(trainer.epsilon_low), float(trainer.epsilon_high)


#: GRPOConfig fields that decide which metric families TRL feeds the monitor (the report's "no data" notes).
SETTINGS = ("beta", "num_iterations", "steps_per_generation", "gradient_accumulation_steps", "scale_rewards",
            "loss_type", "use_vllm", "vllm_importance_sampling_correction", "num_generations",
            "importance_sampling_level")


def trl_settings(trainer: Any) -> dict[str, Any]:
    """The trainer's values of :data:`SETTINGS` (the instance's, else its ``args``'), for the run record."""
    out = {}
    for name in SETTINGS:
        value = getattr(trainer, name, getattr(trainer.args, name, None))
        if isinstance(value, (bool, int, float, str)) or value is None:
            out[name] = value
    return out
