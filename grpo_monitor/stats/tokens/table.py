"""The token pass's two tables: its inputs (``TOKEN_INPUTS``) and the slots of its output vector (``FIELDS``).

``TOKEN_INPUTS`` is one record per token tensor ``observe_loss`` takes (name, dtype kind,
shapes, what it pairs with, its name in the C kernel): the boundary's checks, ``TokenInputs``,
the backends' argument packing, the custom op's schema and the C kernel's argument list
(a generated X-macro) all derive from it, so a new token tensor is one row here plus its
arithmetic (``torch_rows`` and ``native_kernel.c``) and its keyword in ``GRPOMonitor.observe_loss``.

``FIELDS``: every backend lays its vector out in this order (the C kernel's slot order is
generated from it), merging uses each slot's reduction, and ``token_metrics`` reports the
slots that carry a ``key`` straight from the table. A slot is a sum, a minimum or a
maximum, never a mean: micro-batches and ranks merge elementwise.
"""

from __future__ import annotations

from typing import NamedTuple

from ...catalog.family_mismatch import HIST_BINS, HIST_EDGES, HIST_HIGH_EXP, HIST_LOW_EXP  # noqa: F401 - the kernel's
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


class TokenInput(NamedTuple):
    """One token tensor of ``observe_loss``: ``(B, T)`` aligned with the mask, on the mask's device.

    ``kind`` is the dtypes the boundary takes (``"real"``: integer or floating; ``"mask"``:
    bool too); ``per_row``: ``(B,)`` (one value per row) is taken as well; ``pairs``: the other
    inputs its statistics need (documentation; an input alone is never an error); ``c_name``:
    its pointer in ``native_kernel.c`` (``Inputs`` and ``Seg`` members, in this order).
    """

    name: str
    c_name: str
    meaning: str
    kind: str = "real"
    per_row: bool = False
    pairs: str = ""


_I = TokenInput

#: Every token tensor ``observe_loss`` takes, the mask first; the others in the order every backend receives them.
TOKEN_INPUTS: tuple[TokenInput, ...] = (
    _I("mask", "m", "1 on the tokens the loss is taken over (0/1, bool or weights)", kind="mask"),
    _I("advantages", "adv", "the advantage of each token (or of each row)", per_row=True),
    _I("logprobs", "lp", "the trainer's log-probs of the sampled tokens", pairs="ref_logprobs, old_logprobs"),
    _I("ref_logprobs", "ref", "the reference policy's log-probs (the KL estimators)", pairs="logprobs"),
    _I("old_logprobs", "old", "the log-probs the update's ratio divides by (the ratios)", pairs="logprobs"),
    _I("kl", "kl", "the trainer's own per-token KL", pairs="logprobs, ref_logprobs"),
    _I("sampler_logprobs", "smp", "the inference engine's log-probs of the tokens it sampled (the mismatch)",
       pairs="old_logprobs or logprobs"),
    _I("entropy", "ent", "the trainer's per-token entropies"),
    _I("is_weights", "isw", "the importance-sampling correction weights the trainer multiplies each token's loss by "
       "for the training-inference mismatch (TRL's importance_sampling_ratio under "
       "vllm_importance_sampling_correction, truncated at vllm_importance_sampling_clip_max; verl's "
       "rollout_is_weights from compute_rollout_correction_weights)", pairs="sampler_logprobs"),
)
#: The value tensors (every input but the mask), in the order the backends and the C kernel take them.
VALUE_INPUTS: tuple[TokenInput, ...] = tuple(i for i in TOKEN_INPUTS if i.kind != "mask")

#: The ``mm_hist_*`` slots are the fixed histogram of |Delta| whose edges the mismatch family defines
#: (``HIST_EDGES``, :mod:`grpo_monitor.catalog.family_mismatch`).
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
    _F("ratio_k3_sum", "sum"),  # k3(lr): the on_policy rule, trainer against trainer
    # the same inputs per row: GSPO's sequence ratio w = exp(mean lr over the row's valid tokens)
    _F("seq_rows", "sum"),
    _F("seq_w_sum", "sum", "grpo/seq_ratio/mean", per="seq_rows"),
    _F("seq_w_sq_sum", "sum"),
    _F("seq_log_min", "min"),
    _F("seq_log_max", "max"),
    _F("seq_clipped", "sum", "grpo/seq_ratio/clip_frac", per="seq_rows"),  # w outside [1 - low, 1 + high]
    _F("seq_tail", "sum", "grpo/seq_ratio/tail_frac", per="seq_rows"),  # w outside mismatch_band
    # sampler_logprobs with old_logprobs (else logprobs): d = trainer - sampler (Delta), rho = exp(d)
    _F("mm_tokens", "sum"),
    _F("mm_d_sum", "sum"),
    _F("mm_k3_sum", "sum", "grpo/mismatch/k3_mean", per="mm_tokens"),
    _F("mm_abs_sum", "sum", "grpo/mismatch/abs_diff_mean", per="mm_tokens"),
    _F("mm_abs_max", "max", "grpo/mismatch/abs_diff_max", when="mm_tokens"),
    _F("mm_rho_m1_sum", "sum"),
    _F("mm_rho_m1_sq_sum", "sum"),
    _F("mm_d_min", "min"),
    _F("mm_d_max", "max"),
    _F("mm_outside", "sum", "grpo/mismatch/outside_frac", per="mm_tokens"),
    _F("mm_mult_m1_sum", "sum"),
    _F("mm_rows", "sum"),
    _F("mm_seq_w_sum", "sum"),
    _F("mm_seq_w_sq_sum", "sum"),
    # what importance-sampling masks keep (TRL's vllm_importance_sampling_mode): tokens with rho in the band
    # (token_mask) and rows whose weight exp(sum of d) is in it (sequence_mask), W = that row weight
    _F("mm_kept_rho_sum", "sum"),
    _F("mm_kept_rho_sq_sum", "sum"),
    _F("mm_seq_outside", "sum"),
    _F("mm_seq_kept_w_sum", "sum"),
    _F("mm_seq_kept_w_sq_sum", "sum"),
    *(_F(f"mm_hist_{i}", "sum") for i in range(HIST_BINS)),
    # entropy: the trainer's per-token entropies
    _F("ent_tokens", "sum"),
    _F("ent_sum", "sum"),
    _F("ent_sq_sum", "sum"),
    _F("ent_low", "sum", "grpo/entropy/low_frac", per="ent_tokens"),
    # -sampler_logprobs, else -old_logprobs: a Monte Carlo estimate of the sampling entropy
    _F("nll_tokens", "sum"),
    _F("nll_sum", "sum", "grpo/entropy/sampled_nll_mean", per="nll_tokens"),
    # is_weights: the trainer's importance-sampling correction weights, as applied to the loss
    _F("is_tokens", "sum"),
    _F("is_sum", "sum", "grpo/mismatch/is_weight_mean", per="is_tokens"),
    _F("is_min", "min", "grpo/mismatch/is_weight_min", when="is_tokens"),
    _F("is_max", "max", "grpo/mismatch/is_weight_max", when="is_tokens"),
)

#: ``(name, reduction)`` of every slot, in vector order.
TOKEN_FIELDS: tuple[tuple[str, str], ...] = tuple((f.name, f.reduction) for f in FIELDS)
TOKEN_LAYOUT = FieldLayout(TOKEN_FIELDS)
#: The reduction of each slot ("sum", "min" or "max"), in ``TOKEN_FIELDS`` order.
TOKEN_REDUCTIONS: tuple[str, ...] = tuple(f.reduction for f in FIELDS)
TOKEN_INDEX: dict[str, int] = {f.name: i for i, f in enumerate(FIELDS)}
