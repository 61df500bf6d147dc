"""verl's own step metrics (``compute_data_metrics``) against their exact values: the ``trainer_metric`` audit.

verl's ``fit`` computes ``metrics.update(compute_data_metrics(batch=batch, ...))`` after the actor's update
(``verl==0.9.1 verl/trainer/ppo/ray_trainer.py::fit``), when the monitor's step has already ended at
``compute_advantage``: under :func:`~grpo_monitor.integrations.verl.attach` the wrapped
``compute_data_metrics`` hands its values, with the exact ones from the same DataProto, to the next step's
report, labelled with the step they belong to (``of_step``; the last step's values have no next report).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from grpo_monitor.monitor import GRPOMonitor

from ._lookup import module_references, trainer_setting

METRICS_MODULE = "verl.trainer.ppo.metric_utils"


def data_metrics_exact(data: Any, eos_token_ids: Sequence[int] = ()) -> dict[str, float]:
    """The exact values (float64) of ``compute_data_metrics``'s audited keys, from the same DataProto: the score
    mean over non-aborted rows, the advantages over valid response tokens, the response lengths, and (with
    ``eos_token_ids``) the share of rows cut by any cap (no EOS at their last valid token: ``max_response_length``
    or ``max_model_len``)."""
    batch = data.batch
    mask = batch["response_mask"].bool()
    adv = torch.masked_select(batch["advantages"].double(), mask)
    lengths = batch["attention_mask"][:, -batch["responses"].shape[-1]:].double().sum(-1)
    out = {"response_length/mean": float(lengths.mean())}
    if "token_level_scores" in batch.keys() and bool((lengths > 0).any()):
        out["critic/score/mean"] = float(batch["token_level_scores"].double().sum(-1)[lengths > 0].mean())
    if adv.numel():
        out.update({"critic/advantages/mean": float(adv.mean()), "critic/advantages/max": float(adv.max()),
                    "critic/advantages/min": float(adv.min())})
    if eos_token_ids:
        last = (lengths.long() - 1).clamp(min=0)
        tokens = batch["responses"][torch.arange(len(lengths)), last].cpu()
        cut = ~torch.isin(tokens, torch.tensor(list(eos_token_ids)))
        out["response_length/clip_ratio"] = float(cut.double().mean())
    return out


def audit_data_metrics(monitor: GRPOMonitor, data: Any, metrics: dict[str, Any],
                       eos_token_ids: Sequence[int] = (), of_step: int | None = None) -> None:
    """Hand ``compute_data_metrics``'s values to ``monitor.audit_trainer_metrics`` with their exact values
    (:func:`data_metrics_exact`); ``of_step``: the step they belong to when its report has gone out."""
    exact = data_metrics_exact(data, eos_token_ids)
    logged = {k: metrics[k] for k in exact if k in metrics}
    monitor.audit_trainer_metrics("verl", logged, exact, of_step=of_step)


def eos_ids(tokenizer: Any) -> tuple[int, ...]:
    """The tokenizer's EOS ids (an int or a list), () when it has none."""
    eos = getattr(tokenizer, "eos_token_id", None)
    ids = eos if isinstance(eos, (list, tuple)) else [eos]
    return tuple(int(i) for i in ids if isinstance(i, int))


def patch_data_metrics(state: Any) -> None:
    """Wrap ``metric_utils.compute_data_metrics`` and every loaded verl module's copy of it."""
    import importlib

    module = importlib.import_module(METRICS_MODULE)
    original = module.compute_data_metrics
    wrapper = _wrap(original, state)
    for owner, attr in module_references(("verl", "recipe"), original):
        state.patch_with(owner, attr, wrapper)


def _wrap(original: Callable, state: Any) -> Callable:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any):
        out = original(*args, **kwargs)
        guard, monitor = state.guard, state.monitor
        if guard is not None and monitor is not None and isinstance(out, dict):
            batch = args[0] if args else kwargs.get("batch")
            guard(_audit, state, monitor, batch, out)
        return out

    wrapper.__grpo_monitor_original__ = original  # type: ignore[attr-defined]  # marks the wrapper for detach()
    return wrapper


def _audit(state: Any, monitor: GRPOMonitor, batch: Any, metrics: dict[str, Any]) -> None:
    """The step ended at ``compute_advantage`` (one step per call): the values are the previous step's."""
    of_step = monitor.step - 1 if state.step_per_call and monitor.step > 0 else None
    tokenizer = trainer_setting(("tokenizer",))  # RayPPOTrainer.tokenizer, in fit's frame
    audit_data_metrics(monitor, batch, metrics, eos_ids(tokenizer), of_step)
