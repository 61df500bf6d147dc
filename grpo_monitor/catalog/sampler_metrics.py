"""The sampler's side of the update in the catalogue: ``grpo/mismatch/*``, truncation and the degenerate split
(part of :data:`grpo_monitor.catalog.metrics.METRICS`, which lists them; the entropy is a family of its own,
:mod:`.family_entropy`).

One definition for every trainer: Delta = ``old_logprobs`` - ``sampler_logprobs`` per valid token
(trainer minus sampler; ``logprobs`` when no ``old_logprobs`` are given, the first inner epoch),
the token importance weight rho = exp(Delta), and with u = Delta the estimators k1 = -u and
k3 = exp(u) - u - 1 of KL(sampler || trainer) from the sampler's own tokens. The framework key
each one matches, and its sign, is in its meaning.
"""

from __future__ import annotations

from .record import MAX, RATIO, Metric
from .record import metric as _m

_TOK = "mean weighted by the valid tokens with sampler log-probs"
_NEEDS = "sampler_logprobs, old_logprobs or logprobs"


def mismatch_entries() -> list[Metric]:
    """``grpo/mismatch/*``: exact sums of the fused token pass, reduced once per step."""
    mm = dict(section="Mismatch", source="observe_loss", needs=_NEEDS)
    kl, ratio = "mismatch KL: k1 and k3", "importance weight rho = exp(Delta): min / mean / max"
    return [
        _m("grpo/mismatch/k1_mean", "nats", RATIO, _TOK, "Mean of -Delta = sampler - trainer log-prob: the k1 "
           "estimate of KL(sampler || trainer), OpenRLHF's vllm_kl (the same sign), prime-rl's mismatch_kl and "
           "NeMo-RL's gen_kl_error up to sign conventions; it is > 0 on healthy noise, so it is not a bias "
           "test.", panel=kl, **mm),
        _m("grpo/mismatch/k3_mean", "nats", RATIO, _TOK, "Mean of k3 = exp(Delta) - Delta - 1 (never negative, "
           "unbiased for KL(sampler || trainer); verl's rollout_corr KL): the mismatch invariant's error test. "
           "Numerical noise stays far below tolerances.mismatch_k3 (docs/mismatch.md).", panel=kl, **mm),
        _m("grpo/mismatch/abs_diff_mean", "nats", RATIO, _TOK, "Mean |Delta| over valid tokens: TRL's "
           "sampling/sampling_logp_difference/mean (same sign convention, trainer minus sampler).", **mm),
        _m("grpo/mismatch/abs_diff_max", "nats", MAX, "max", "Largest |Delta|: TRL's "
           "sampling/sampling_logp_difference/max. Set by the rarest token of millions, it is large on healthy "
           "runs (0.2-2.5 nats); not a defect test.", **mm),
        _m("grpo/mismatch/abs_diff_p99", "nats", "from a fixed histogram of |Delta| (4 bins per octave, "
           "2^-16..2^6) summed over micro-batches and ranks", "max", "The 99th percentile of |Delta|: the upper "
           "edge of the histogram bin holding it (within 25% above the exact value), at most abs_diff_max.", **mm),
        _m("grpo/mismatch/ratio_mean", "ratio", RATIO, _TOK, "Mean token importance weight rho: TRL's "
           "sampling/importance_sampling_ratio/mean (token modes); AReaL's behave_imp_weight is rho (logged over "
           "the tokens its filter keeps). E_sampler[rho] = 1 whatever the noise when the sampler reports the "
           "log-probs it sampled from.", panel=ratio, **mm),
        _m("grpo/mismatch/ratio_min", "ratio", "min over micro-batches and ranks", "min", "Smallest rho "
           "(exp of the smallest Delta): TRL's sampling/importance_sampling_ratio/min.", panel=ratio, **mm),
        _m("grpo/mismatch/ratio_max", "ratio", MAX, "max", "Largest rho: TRL's "
           "sampling/importance_sampling_ratio/max.", panel=ratio, **mm),
        _m("grpo/mismatch/ratio_mean_z", "standard errors", "from the sums of rho - 1 and (rho - 1)^2 over "
           "micro-batches and ranks", "mean", "The deviation (ratio_mean - 1) / its standard error: beyond "
           "tolerances.mismatch_ratio_z the sampler's log-probs are not those of the distribution it sampled "
           "from (top-p/top-k renormalised log-probs): a mismatch warning.", **mm),
        _m("grpo/mismatch/outside_frac", "fraction", RATIO, _TOK, "Share of valid tokens with rho outside "
           "[mismatch_ratio_low, mismatch_ratio_high], the band truncated/masked importance sampling uses "
           "(TRL's vllm_importance_sampling_clip_*, verl's rollout_is thresholds).", **mm),
        _m("grpo/mismatch/seq_ratio_mean", "ratio", "ratio of per-row sums over micro-batches and ranks",
           "mean weighted by rows", "Mean over rows of w = exp(mean Delta over the row's valid tokens), the "
           "length-normalised sequence weight (TRL's sequence modes use the sum instead of the mean).", **mm),
        _m("grpo/mismatch/seq_ess", "fraction", "from per-row sums of w and w^2 over micro-batches and ranks",
           "mean", "Normalised effective sample size (sum w)^2 / (n sum w^2) of the sequence weights (verl's "
           "rollout_corr ESS): 1 when sampler and trainer agree, towards 1/n when a few rows dominate.", **mm),
        _m("grpo/mismatch/masked_frac", "fraction", RATIO, "mean weighted by tokens (token) or rows (sequence)",
           "Share of valid tokens (mismatch_mask='token': TRL's token_mask) or rows ('sequence': sequence_mask, "
           "weight exp(sum of Delta)) whose importance weight leaves [mismatch_ratio_low, mismatch_ratio_high] and "
           "that the correction zeroes; TRL logs no such fraction.", only_when="MonitorConfig.mismatch_mask set "
           "(the TRL integration sets it from vllm_importance_sampling_mode)", **mm),
        _m("grpo/mismatch/masked_ess", "fraction", "from sums of the kept weights and their squares over "
           "micro-batches and ranks", "mean", "Normalised effective sample size (sum w)^2 / (n sum w^2) of the "
           "importance weights after masking (masked ones 0, n every token or row): how much of the batch the "
           "corrected update still uses.", only_when="MonitorConfig.mismatch_mask set", **mm),
        _m("grpo/mismatch/mult_prob_error", "ratio", RATIO, _TOK, "Mean of exp|Delta|, NeMo-RL's "
           "token_mult_prob_error: 1 when sampler and trainer agree.", **mm),
        *is_weight_entries(),
    ]


def is_weight_entries() -> list[Metric]:
    """``grpo/mismatch/is_weight_*``: the correction weights the trainer applies (``observe_loss(is_weights=)``)."""
    isw = dict(section="Mismatch", source="observe_loss", needs="is_weights",
               panel="importance-sampling correction weights the loss applies: min / mean / max")
    tok = "mean weighted by the valid tokens with is_weights"
    return [
        _m("grpo/mismatch/is_weight_mean", "ratio", RATIO, tok, "Mean over valid tokens of the importance-sampling "
           "correction weight the trainer multiplies each token's loss by: TRL's importance_sampling_ratio under "
           "vllm_importance_sampling_correction (exp(Delta) truncated at vllm_importance_sampling_clip_max, formerly "
           "vllm_importance_sampling_cap, or zeroed outside the band in the *_mask modes) and verl's "
           "rollout_is_weights (compute_rollout_correction_weights; its rollout_corr/rollout_is_mean). Well below 1 "
           "the correction discards much of the batch's signal; equal to ratio_mean with no truncation.", **isw),
        _m("grpo/mismatch/is_weight_min", "ratio", "min over micro-batches and ranks", "min", "Smallest correction "
           "weight on a valid token (0 where a mask mode drops a token or row).", **isw),
        _m("grpo/mismatch/is_weight_max", "ratio", MAX, "max", "Largest correction weight on a valid token: at "
           "most the truncation cap when the trainer truncates (TRL's vllm_importance_sampling_clip_max, verl's "
           "rollout_is_threshold); above it, the weights are not truncated as configured.", **isw),
    ]


def rollout_entries() -> list[Metric]:
    """Truncation and the degenerate split (shares of all groups, adding up to the degenerate rate)."""
    roll = dict(section="Groups", source="observe_rollout")
    wg, split = "mean weighted by grpo/groups/total", "degenerate groups: unsolved / solved / other"
    trunc = "truncated=, or lengths with MonitorConfig.max_response_length"
    return [
        _m("grpo/rows/truncated_rate", "fraction", RATIO, "mean weighted by rows", "Share of rows cut at the "
           "response-length limit (TRL's completions/clipped_ratio, verl's response_length/clip_ratio); a rise "
           "means answers do not fit and score as failures.", needs=trunc, **roll),
        _m("grpo/groups/degenerate_low_rate", "fraction", RATIO, wg, "Share of all groups whose scorable rows all "
           "hold the batch's lowest reward: unsolved questions (all-failed).", panel=split, **roll),
        _m("grpo/groups/degenerate_high_rate", "fraction", RATIO, wg, "Share of all groups whose scorable rows all "
           "hold the batch's highest reward: solved questions (all-correct).", panel=split, **roll),
        _m("grpo/groups/degenerate_other_rate", "fraction", RATIO, wg, "Share of all groups that are degenerate at "
           "another reward (or have fewer than two scorable rows); low + high + other = degenerate_rate.",
           panel=split, **roll),
        _m("grpo/groups/degenerate_truncated_rate", "fraction", RATIO, wg, "Share of all groups that are degenerate "
           "with every row truncated: 'loss is 0' because no answer fits the length limit.", needs=trunc, **roll),
        _m("grpo/rows/length_above_mean", "tokens", RATIO, "mean weighted by rows", "Mean length of the rows "
           "rewarded above their group's mean (live groups).", needs="lengths", **roll),
        _m("grpo/rows/length_below_mean", "tokens", RATIO, "mean weighted by rows", "Mean length of the rows "
           "rewarded below their group's mean (live groups); far above length_above_mean, the long answers are "
           "the failing (often truncated) ones.", needs="lengths", **roll),
    ]
