"""Each observe call's arguments, checked and reduced to what the accumulator keeps.

Pure (no monitor state, no host sync): :class:`~grpo_monitor.monitor.GRPOMonitor` calls
these first, so a user's mistake raises before anything is stored, then stores what they
return: :func:`rollout_input` and :func:`generation_input` a statistics vector and a
record, :func:`loss_input` the token vector and the checked tensors.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..config import MonitorConfig
from ..stats.groups import group_reward_stats
from ..stats.rollout import rollout_stats
from ..stats.routing import ROUTING_FIELDS, ROUTING_LAYOUT, routing_vector, validate_routing
from ..stats.tokens.table import TOKEN_FIELDS
from . import inputs
from .accumulator import LEDGER, GenerationRecord, RolloutRecord

#: The slots of ``observe_loss``'s vector: the fused token pass's, then the MoE routing counts.
LOSS_FIELDS = (*TOKEN_FIELDS, *ROUTING_FIELDS)
_EMPTY_ROUTING: dict[torch.device, torch.Tensor] = {}


def rollout_input(config: MonitorConfig, rewards: Any, *, group_ids: Any = None, advantages: Any = None,
                  question_ids: Any = None, lengths: Any = None, truncated: Any = None,
                  reward_components: Any = None, reward_weights: Any = None, policy_version: Any = None,
                  trained_version: Any = None, step: int = 0) -> tuple[torch.Tensor, RolloutRecord] | None:
    """``observe_rollout``'s arguments checked; the rollout's statistics vector and record (``None``: empty).
    ``trained_version`` defaults to ``step``."""
    layout = inputs.group_layout(rewards, group_ids, config.group_size)
    adv = inputs.align_rows(advantages, "advantages", layout) if advantages is not None else None
    tokens = inputs.token_counts(lengths, "lengths", layout) if lengths is not None else None
    questions = inputs.per_group_labels(question_ids, layout) if question_ids is not None else None
    comps, weights = (inputs.align_components(reward_components, reward_weights, layout)
                      if reward_components is not None else (None, None))
    cut = inputs.truncation_rows(truncated, tokens, config.max_response_length, layout)
    ages = _ages(policy_version, trained_version, step, layout)
    if layout.rewards.numel() == 0:
        return None
    vec, detail = rollout_stats(layout.rewards, layout.segments(), layout.num_groups, adv, config.tolerances,
                                config.group_size, tokens, cut, ages)
    return vec, RolloutRecord(detail, layout.labels, questions, layout.rewards, layout.gid, adv, tokens, comps,
                              weights)


def _dropped(value: Any, layout: Any) -> torch.Tensor | None:
    """``dropped`` as a flat bool tensor aligned with the rewards (bool or 0/1 integers)."""
    if value is None:
        return None
    t = inputs.as_tensor(value, "dropped")
    if t.is_floating_point() or t.is_complex():
        raise inputs.InputTypeError(f"dropped must be a bool per row (True: dropped before training), "
                                    f"but has dtype {t.dtype}")
    return inputs.align_rows(t, "dropped", layout) > 0


def _ages(versions: Any, trained: Any, step: int, layout: Any) -> dict[str, torch.Tensor] | None:
    """The age slots of ``policy_version`` (integers per row) against ``trained_version`` (an int; default ``step``)."""
    from ..stats.staleness import age_fields

    if versions is None:
        if trained is not None:
            raise inputs.InputValueError("trained_version was given without policy_version; pass the weights "
                                         "version of each row as policy_version=")
        return None
    t = inputs.as_tensor(versions, "policy_version")
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise inputs.InputTypeError(f"policy_version must hold integers (the weights version of each row), "
                                    f"but has dtype {t.dtype}")
    if trained is not None and (isinstance(trained, bool) or not isinstance(trained, int)):
        raise inputs.InputTypeError(f"trained_version must be an int (the version being trained), "
                                    f"but got {type(trained).__name__}")
    aligned = inputs.align_rows(t, "policy_version", layout)
    return age_fields(aligned, step if trained is None else trained) if aligned.numel() else None


def generation_input(config: MonitorConfig, rewards: Any, *, batch: int, group_ids: Any = None,
                     question_ids: Any = None, lengths: Any = None, dropped: Any = None,
                     ) -> tuple[torch.Tensor, GenerationRecord] | None:
    """``observe_generation``'s arguments checked; the batch's ledger vector and record (``None``: empty).

    ``batch`` is the call's number in the step (1, 2, ...): reduced by max across ranks; ``dropped`` (bool per
    row) the rows dropped before training (too stale), for the drop's selection bias.
    """
    from ..stats.drop_bias import drop_fields

    layout = inputs.group_layout(rewards, group_ids, config.group_size)
    flags = _dropped(dropped, layout)
    if layout.rewards.numel() == 0:
        return None
    s = group_reward_stats(layout.rewards, layout.segments())
    tokens = torch.zeros((), dtype=torch.float64, device=layout.rewards.device)
    row_lengths = inputs.token_counts(lengths, "lengths", layout) if lengths is not None else None
    if row_lengths is not None:
        tokens = row_lengths.sum()
    drops = {} if flags is None else drop_fields(layout.rewards.reshape(-1).to(torch.float64), flags, row_lengths,
                                                 layout.segments())
    vec = LEDGER.pack(dict(**drops,
        generation_batches=batch, generated_groups=layout.num_groups, generated_responses=len(layout.rewards),
        generated_tokens=tokens, token_batches=float(lengths is not None), generated_degenerate=s.degenerate.sum(),
        generated_nonbinary=s.nonbinary,
    ), tokens.device)
    questions = inputs.per_group_labels(question_ids, layout) if question_ids is not None else None
    return vec, GenerationRecord(s, s.reward_sum, questions)


@dataclasses.dataclass(frozen=True)
class LossInput:
    """One ``observe_loss`` micro-batch, checked: the token statistics vector and the tensors behind it."""

    mask: torch.Tensor
    tensors: dict[str, torch.Tensor]  # the token tensors given (detached), by argument name
    vec: torch.Tensor  # token sufficient statistics, laid out as ``fields``
    fields: Any  # ``LOSS_FIELDS``
    loss: torch.Tensor | None  # on its autograd graph, for the measured weights
    rows: torch.Tensor | None
    logprobs: torch.Tensor | None  # as given (with grad), for the measured weights

    @property
    def mismatch(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """(mask, trainer log-probs, sampler log-probs) when the sampler's log-probs were given."""
        trainer = self.tensors.get("old_logprobs", self.tensors.get("logprobs"))
        if "sampler_logprobs" not in self.tensors or trainer is None:
            return None
        return self.mask, trainer, self.tensors["sampler_logprobs"]


def loss_input(config: MonitorConfig, *, mask: Any, loss: Any = None, rows: Any = None, routed_experts: Any = None,
               sampler_routed_experts: Any = None, **token_tensors: Any) -> LossInput:
    """``observe_loss``'s arguments checked (``token_tensors``: advantages, logprobs, ..., None skipped);
    the micro-batch's token statistics, computed on the device, laid out by ``LOSS_FIELDS`` (the token slots,
    then the routing counts of ``routed_experts`` / ``sampler_routed_experts``: :mod:`grpo_monitor.stats.routing`)."""
    from ..stats import tokens as tok  # imported when first used (and replaceable in tests)

    raw_logprobs, loss_t, rows_t = token_tensors.get("logprobs"), inputs.loss_arg(loss), inputs.rows_arg(rows, mask)
    tensors: dict[str, Any] = {k: inputs.as_tensor(v, k) for k, v in token_tensors.items() if v is not None}
    mask_t = inputs.as_tensor(mask, "mask")
    routed = _routing(mask_t, routed_experts, sampler_routed_experts)
    with inputs.boundary():
        tok.validate_token_inputs(mask_t, **tensors)
    vec = tok.token_sufficient_stats(
        mask_t, clip_range=config.clip_range, kl_clamp=config.kl_clamp, entropy_low=config.entropy_low_threshold,
        mismatch_band=(config.mismatch_ratio_low, config.mismatch_ratio_high), **tensors)
    vec = torch.cat([vec, routing_vector(mask_t, *routed) if routed else _empty_routing(vec.device)])
    return LossInput(mask_t, tensors, vec, LOSS_FIELDS, loss_t, rows_t,
                     raw_logprobs if isinstance(raw_logprobs, torch.Tensor) else None)


def _routing(mask: torch.Tensor, routed: Any, sampler: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``routed_experts`` and ``sampler_routed_experts`` as tensors, checked against ``mask`` (None: not given)."""
    if routed is None and sampler is None:
        return None
    a = inputs.as_tensor(routed, "routed_experts") if routed is not None else None
    b = inputs.as_tensor(sampler, "sampler_routed_experts") if sampler is not None else None
    with inputs.boundary():
        validate_routing(mask, a, b)
    assert a is not None and b is not None
    return a.detach(), b.detach()


def _empty_routing(device: torch.device) -> torch.Tensor:
    if device not in _EMPTY_ROUTING:
        _EMPTY_ROUTING[device] = ROUTING_LAYOUT.empty(device)
    return _EMPTY_ROUTING[device]
