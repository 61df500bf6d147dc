"""The field table: one record per slot of the token statistics vector.

Every backend lays its vector out in this order (the C kernel's slot order is generated
from it), merging uses each slot's reduction, and ``token_metrics`` reports the slots that
carry a ``key`` straight from the table. A slot is a sum, a minimum or a maximum, never a
mean: micro-batches and ranks merge elementwise.
"""

from __future__ import annotations

from typing import NamedTuple

from ..fields import FieldLayout


class TokenField(NamedTuple):
    """One slot: its name, its reduction and, if it reports a metric on its own, how.

    ``key`` is reported as ``value / per`` when ``per`` names a count slot (a mean or a
    fraction), else as the value itself. It appears when the ``when`` slot (default:
    ``per``) is positive, or always when neither is given. Metrics built from several
    slots (stds, k3 maxima) are derived in ``readout``.
    """

    name: str
    reduction: str  # "sum", "min" or "max"
    key: str | None = None
    per: str | None = None
    when: str | None = None


_F = TokenField
#: The table. ``*_tokens`` count the valid tokens that carried the inputs a group of slots
#: needs, so absent inputs give no keys. With u = ref_logprobs - logprobs and
#: lr = logprobs - old_logprobs.
FIELDS: tuple[TokenField, ...] = (
    _F("valid_tokens", "sum", "grpo/tokens/valid"),
    _F("rows_with_tokens", "sum", "grpo/tokens/rows"),
    _F("mask_nonbinary", "sum", "grpo/tokens/mask_nonbinary"),
    # advantages, (B,) or (B, T)
    _F("adv_tokens", "sum"),
    _F("adv_sum", "sum", "grpo/tokens/adv_mean", per="adv_tokens"),
    _F("adv_abs_sum", "sum", "grpo/tokens/adv_abs_mean", per="adv_tokens"),
    _F("adv_row_spread_max", "max", "grpo/tokens/adv_row_spread_max", when="adv_tokens"),
    _F("adv_live_tokens", "sum", "grpo/tokens/live_fraction", per="adv_tokens"),
    # any of logprobs, ref_logprobs, old_logprobs
    _F("logprob_tokens", "sum"),
    _F("logprob_nonfinite", "sum", "grpo/tokens/logprob_nonfinite", when="logprob_tokens"),
    # logprobs and ref_logprobs: moments of u (k1, k2) and of k3 = exp(u) - u - 1
    _F("kl_tokens", "sum"),
    _F("kl_u_sum", "sum"),
    _F("kl_u_sq_sum", "sum"),
    _F("kl_u_quad_sum", "sum"),
    _F("kl_u_pos", "sum", "grpo/kl/k1_neg_frac", per="kl_tokens"),  # k1 = -u < 0
    _F("kl_u_max", "max"),
    _F("kl_u_min", "min"),
    _F("kl_k3_sum", "sum"),
    _F("kl_k3_sq_sum", "sum"),
    # the trainer's own per-token KL
    _F("user_kl_tokens", "sum"),
    _F("user_kl_sum", "sum"),
    _F("user_kl_sq_sum", "sum"),
    _F("user_k3_tokens", "sum"),
    _F("user_k3_absdiff_max", "max", "grpo/kl/user_k3_max_abs_diff", when="user_k3_tokens"),
    _F("user_clamp_tokens", "sum"),
    _F("user_clamp_hits", "sum", "grpo/kl/user_clamp_frac", per="user_clamp_tokens"),
    # logprobs and old_logprobs: importance ratio exp(lr)
    _F("ratio_tokens", "sum"),
    _F("ratio_m1_sum", "sum"),
    _F("ratio_clipped", "sum", "grpo/ratio/clip_frac", per="ratio_tokens"),
    _F("on_policy_absdiff_max", "max", "grpo/ratio/log_abs_max", when="ratio_tokens"),
)

#: ``(name, reduction)`` of every slot, in vector order.
TOKEN_FIELDS: tuple[tuple[str, str], ...] = tuple((f.name, f.reduction) for f in FIELDS)
TOKEN_LAYOUT = FieldLayout(TOKEN_FIELDS)
#: The reduction of each slot ("sum", "min" or "max"), in ``TOKEN_FIELDS`` order.
TOKEN_REDUCTIONS: tuple[str, ...] = tuple(f.reduction for f in FIELDS)
TOKEN_INDEX: dict[str, int] = {f.name: i for i, f in enumerate(FIELDS)}
