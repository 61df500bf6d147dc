"""The training-inference mismatch family in one place (:data:`MISMATCH`): ``grpo/mismatch/*`` — its records, its
readout from the synced token sums and the report figure it declares.

One definition for every trainer: Delta = ``old_logprobs`` - ``sampler_logprobs`` per valid token
(trainer minus sampler; ``logprobs`` when no ``old_logprobs`` are given, the first inner epoch),
the token importance weight rho = exp(Delta), and with u = Delta the estimators k1 = -u and
k3 = exp(u) - u - 1 of KL(sampler || trainer) from the sampler's own tokens. The framework key
each one matches, and its sign, is in its meaning. The token pass (``stats/tokens/table.py``, ``mm_*``
slots) sums them; ``k3_mean``, ``abs_diff_mean``, ``abs_diff_max`` and ``outside_frac`` are single slots the
field table reports, the others are read out here (the mismatch invariant reads the same readout,
``invariants/tokens.py``).

>>> from grpo_monitor.catalog.family import read_out
>>> v = {"mm_tokens": 2.0, "mm_d_sum": 0.0, "mm_rho_m1_sum": 0.0, "mm_rho_m1_sq_sum": 0.0, "mm_d_min": 0.0,
...      "mm_d_max": 0.0, "mm_mult_m1_sum": 0.0, "mm_rows": 1.0, "mm_seq_w_sum": 1.0, "mm_seq_w_sq_sum": 1.0,
...      "mm_abs_max": 0.0, **{f"mm_hist_{i}": 2.0 if i == 0 else 0.0 for i in range(HIST_BINS)}}
>>> read_out([MISMATCH], "tokens", v)["grpo/mismatch/ratio_mean"]
1.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .family import Family, FigureSpec, Panel, Readout, Shade
from .record import MAX, RATIO, Metric
from .record import metric as _m

#: The fixed histogram of |Delta| behind ``grpo/mismatch/abs_diff_p99`` (slots ``mm_hist_*`` of the token pass):
#: four bins per octave with edges (1, 1.25, 1.5, 1.75) x 2^e for e in [HIST_LOW_EXP, HIST_HIGH_EXP), exactly
#: representable in float32 (so every backend and rank bins a value alike); bin 0 holds |Delta| below
#: 2^HIST_LOW_EXP (0 included), the last bin everything from 2^HIST_HIGH_EXP up.
HIST_LOW_EXP, HIST_HIGH_EXP = -16, 6
HIST_EDGES: tuple[float, ...] = tuple(
    (1.0 + q / 4) * 2.0 ** e for e in range(HIST_LOW_EXP, HIST_HIGH_EXP) for q in range(4)) + (2.0 ** HIST_HIGH_EXP,)
HIST_BINS = len(HIST_EDGES) + 1
#: Healthy numerical noise of grpo/mismatch/k3_mean (nats per token) measured in docs/mismatch.md over 200 steps
#: of a real tiny LM: the float32 KV-cache sampler's median up to the bf16 sampler's maximum (the report's band).
NOISE_K3 = (8.7e-14, 1.7e-4)

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


# --- the readouts: plain floats of the synced token slots ---------------------------------------------------------


def mismatch_metrics(v: Mapping[str, float]) -> dict[str, float]:
    """``grpo/mismatch/*`` from the slots of d = trainer - sampler log-probs (Delta) and rho = exp(d)."""
    n = v["mm_tokens"]
    dev = v["mm_rho_m1_sum"] / n
    var = max(v["mm_rho_m1_sq_sum"] / n - dev * dev, 0.0)
    rows, w, w2 = v["mm_rows"], v["mm_seq_w_sum"], v["mm_seq_w_sq_sum"]
    return {
        "grpo/mismatch/k1_mean": -v["mm_d_sum"] / n,
        "grpo/mismatch/abs_diff_p99": abs_diff_quantile(v, 0.99),
        "grpo/mismatch/ratio_mean": 1.0 + dev,
        "grpo/mismatch/ratio_min": math.exp(v["mm_d_min"]) if v["mm_d_min"] < 709 else math.inf,
        "grpo/mismatch/ratio_max": math.exp(v["mm_d_max"]) if v["mm_d_max"] < 709 else math.inf,
        "grpo/mismatch/ratio_mean_z": ratio_z(dev, var, n),
        "grpo/mismatch/mult_prob_error": 1.0 + v["mm_mult_m1_sum"] / n,
        "grpo/mismatch/seq_ratio_mean": w / rows if rows > 0 else math.nan,
        "grpo/mismatch/seq_ess": w * w / (rows * w2) if rows > 0 and w2 > 0 else math.nan,
    }


def masked_metrics(v: Mapping[str, float], level: str) -> dict[str, float]:
    """What TRL's token_mask (rho outside the band zeroed) or sequence_mask (rows whose weight exp(sum of Delta)
    leaves the band zeroed) masks, and the normalised ESS (sum w)^2 / (n sum w^2) of the weights it keeps."""
    if level == "token":
        n, masked, w, w2 = v["mm_tokens"], v["mm_outside"], v["mm_kept_rho_sum"], v["mm_kept_rho_sq_sum"]
    elif level == "sequence":
        n, masked, w, w2 = v["mm_rows"], v["mm_seq_outside"], v["mm_seq_kept_w_sum"], v["mm_seq_kept_w_sq_sum"]
    else:
        raise ValueError(f"mismatch_mask must be 'token', 'sequence' or None, but got {level!r}")
    return {"grpo/mismatch/masked_frac": masked / n, "grpo/mismatch/masked_ess": w * w / (n * w2) if w2 > 0 else 0.0}


def ratio_z(dev: float, var: float, n: float) -> float:
    """(mean rho - 1) in standard errors sqrt(var / n); rho - 1 are martingale differences under a sampler
    that reports its own distribution, so uncorrelated across tokens. 0 below two tokens and for 0 / 0;
    d / 0 is +-inf (identical weights away from 1)."""
    se = math.sqrt(var / n)
    if n < 2:
        return 0.0
    if se > 0:
        return dev / se
    return 0.0 if dev == 0 or math.isnan(dev) else math.copysign(math.inf, dev)


def abs_diff_quantile(v: Mapping[str, float], q: float) -> float:
    """Upper edge of the ``HIST_EDGES`` bin holding the ``q`` quantile of |Delta|, at most ``mm_abs_max``."""
    need, seen = q * v["mm_tokens"], 0.0
    for i in range(HIST_BINS):
        seen += v[f"mm_hist_{i}"]
        if seen >= need:
            return min(HIST_EDGES[i], v["mm_abs_max"]) if i < len(HIST_EDGES) else v["mm_abs_max"]
    return v["mm_abs_max"]


# --- the figure it declares ---------------------------------------------------------------------------------------

_K3, _BIAS = (0.0, 1.0, "tolerances.mismatch_k3"), "tolerances.mismatch_ratio_bias"
FIGURE = FigureSpec(
    "mismatch", "Training-inference mismatch",
    panels=(
        Panel("log", ("grpo/mismatch/k3_mean",), "Mismatch KL(sampler || trainer): k3 = e^D - D - 1, D = trainer - "
              "sampler", "nats per token", references=((_K3, "error threshold mismatch_k3 = {tolerances.mismatch_k3:g} "
                                                        "nats"),), reference_color="red",
              shades=(Shade(NOISE_K3[0], NOISE_K3[1], f"healthy noise measured: {NOISE_K3[0]:g} to {NOISE_K3[1]:g} "
                            "(docs/mismatch.md)", pad=30.0),)),
        Panel("lines", ("grpo/mismatch/ratio_mean",), "Mean token importance weight rho = exp(D): 1 when the sampler "
              "reports what it sampled", "weight", references=((1.0, "E_sampler[rho] = 1"),),
              shades=(Shade((1.0, -1.0, _BIAS), (1.0, 1.0, _BIAS), "1 +- mismatch_ratio_bias ({" + _BIAS + ":g})"),),
              min_span=(0.0, 4.0, _BIAS)),
    ),
    caption="Mismatch between the sampler's log-probs and the trainer's, D = trainer - sampler per valid token: "
            "above the error threshold mismatch_k3 = {tolerances.mismatch_k3:g} nats (this run's config) the mismatch "
            f"is a defect, the green band ({NOISE_K3[0]:g} to {NOISE_K3[1]:g}) is the numerical noise measured in "
            "docs/mismatch.md; importance weights average to 1 within +-{tolerances.mismatch_ratio_bias:g} when the "
            "sampler reports what it sampled",
    statements=(("the mismatch KL k3 per token", "grpo/mismatch/k3_mean", "{:.3g}"),
                ("the mean token importance weight", "grpo/mismatch/ratio_mean", "{:.4f}")),
    peaks=(("the largest mismatch KL k3 per token", "grpo/mismatch/k3_mean", "{:.3g}"),),
    breaches="mismatch", after="ratio", height=2.7)

#: The family: records, the token pass's readouts (the masked share under the run's ``mismatch_mask``), its figure
#: and its scan rows (a recording's own logged mismatch, ``tools/scan/logged.py``, included).
MISMATCH = Family(
    "mismatch", tuple(mismatch_entries()),
    readouts=(Readout("tokens", "mm_tokens", mismatch_metrics),
              Readout("tokens", "mm_tokens", masked_metrics, setting="mismatch_mask")),
    figures=(FIGURE,),
    trends=(("mismatch k3 (nats/token)", "grpo/mismatch/k3_mean", "{:.3g}"),
            ("mismatch k1 (nats/token)", "grpo/mismatch/k1_mean", "{:.3g}"),
            ("mean |trainer - sampler|", "grpo/mismatch/abs_diff_mean", "{:.3g}"),
            ("max |trainer - sampler|", "grpo/mismatch/abs_diff_max", "{:.3g}"),
            ("mult. prob. error", "grpo/mismatch/mult_prob_error", "{:.4g}")))
