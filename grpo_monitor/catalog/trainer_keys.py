"""TRAINER_KEYS: the trainers' own logged metrics, each mapped to the monitor's exact value of the same quantity.

One :class:`TrainerKey` per framework key: where the framework computes it (file@commit), the monitor
quantity it equals (a monitor key, or the exact recomputation an integration makes from the same
tensors), the transform between the two definitions, the tolerance and the noise it was measured
on, and the causes that explain a disagreement. ``scan`` reads a recording through it
(:mod:`grpo_monitor.tools.scan.logged`), the integrations audit the live values through it
(``GRPOMonitor.audit_trainer_metrics``), ``docs/trainer_metrics.md`` lists it. Keys with no faithful
counterpart are in :data:`NO_COUNTERPART`, with why.

A disagreement beyond ``atol + rtol * |exact|`` is a ``trainer_metric`` *warning*: the update
is right, the dashboard is not.
"""

from __future__ import annotations

import dataclasses

TRL = "trl==1.16.0 trl/trainer/grpo_trainer.py"
VERL_DATA = "verl==0.9.1 verl/trainer/ppo/metric_utils.py::compute_data_metrics"
VERL_ACTOR = "verl==0.9.1 verl/trainer/ppo/core_algos.py (policy losses), ray_trainer.py::fit"
VERL_ROLLOUT = "verl==0.9.1 verl/trainer/ppo/rollout_corr_helper.py"
SKYRL = "NovaSky-AI/SkyRL@4d8da74 skyrl/backends/skyrl_train/workers/worker.py"
OPENRLHF = "openrlhf==0.9 openrlhf/trainer/ppo_utils/experience_maker.py"
NEMO = "NVIDIA-NeMo/RL nemo_rl/algorithms/grpo.py"
AREAL = "inclusionAI/AReaL areal/engine/ppo/actor.py"

#: Why a trainer's number and the exact one disagree, by name (a finding names one).
CAUSES: dict[str, str] = {
    "float32_zero_std": "float32 zero-std test: the float32 std of a group of equal non-dyadic rewards is not "
                        "exactly 0, so a constant group is not counted (TRL's torch.isclose(std, 0))",
    "per_rank_means": "mean of per-rank means: ranks with unequal token or row counts weigh equally instead of "
                      "one global sum over one global count (SkyRL #1822, TRL #6380)",
    "micro_batch_averaging": "per-micro-batch averaging: a flat mean of micro-batch entries weighs an "
                             "accumulation window by its micro-batch count, so uneven windows skew it (TRL #7047)",
    "accumulation_scaling": "accumulation scaling: the value is multiplied or divided by the number of "
                            "accumulation steps or micro-batches (verl #4778, #4711)",
    "dp_sum": "a sum over data-parallel ranks: the metric grows with the data-parallel size (verl #5203)",
    "missed_cap": "a cap the clip ratio misses: responses cut by another cap (max_model_len) end shorter than "
                  "the response cap the ratio tests, so they are not counted (verl #7823)",
    "off_by_one": "an off-by-one window: the value belongs to the neighbouring step (async logging, verl #6796)",
    "definition": "a different definition (another denominator, mask or sign) than the one documented",
}


@dataclasses.dataclass(frozen=True)
class TrainerKey:
    """One framework key and the monitor's exact value of the same quantity.

    ``quantity``: the monitor key whose value is the exact counterpart, or ``"exact"`` when the
    integration recomputes it (float64) from the tensors the trainer reduced. ``scan_key``: the monitor
    key a recording's value is reported under by ``grpo-monitor scan`` (sampler-side keys the monitor
    cannot rebuild offline from rollouts).
    """

    framework: str
    key: str  # as the framework logs it (before a logger's ``train/`` prefix)
    quantity: str
    transform: str
    rtol: float
    atol: float
    noise: str  # the disagreement measured on healthy runs (docs/trainer_metrics.md)
    source: str
    causes: tuple[str, ...] = ("definition",)
    scan_key: str = ""  # the monitor key ``grpo-monitor scan`` reports a recording's value under ("" none)

    def tolerance(self, exact: float) -> float:
        """The largest healthy |trainer - exact| at ``exact``."""
        return self.atol + self.rtol * abs(exact)


_F32 = "float32 rounding of a mean over <= 10^4 values: < 1e-6 relative (measured 0 to 2e-7)"
_RATE = "a fraction of rows or groups: exact in float32 up to 1e-7 (measured 0)"


def _k(framework: str, key: str, quantity: str, transform: str, source: str, *, rtol: float = 1e-5,
       atol: float = 1e-6, noise: str = _F32, causes: tuple[str, ...] = ("definition",), scan: bool | str = False
       ) -> TrainerKey:
    """A record; ``scan=True`` reports a recording's value under ``quantity``, a string under that key."""
    scan_key = scan if isinstance(scan, str) else quantity if scan else ""
    return TrainerKey(framework, key, quantity, transform, rtol, atol, noise, source, causes, scan_key)


_TRL_ROLLOUT = ("micro_batch_averaging",)
_TRL_LOSS = ("per_rank_means", "micro_batch_averaging")
_RECORDS: tuple[TrainerKey, ...] = (
    # ------------------------------------------------------------------ TRL (per generation entry)
    _k("TRL", "frac_reward_zero_std", "grpo/groups/degenerate_rate",
       "share of groups whose scorable rewards are all equal (a group with fewer than two scorable rows has no "
       "std: not counted); TRL tests torch.isclose(std, 0) on float32 group stds, the exact value compares the "
       "float64 rewards (recomputed by the TRL integration; offline, the monitor's degenerate rate)",
       TRL + "::_generate_and_score_completions", atol=1e-6, rtol=0.0,
       noise=_RATE, causes=("float32_zero_std", *_TRL_ROLLOUT)),
    _k("TRL", "reward", "exact", "nanmean of the gathered weighted rewards (unscorable rows NaN, left out)",
       TRL + "::_generate_and_score_completions", causes=_TRL_ROLLOUT),
    _k("TRL", "reward_std", "exact", "nanstd (Bessel) of the gathered rewards over the whole batch, not per group",
       TRL + "::_generate_and_score_completions", causes=_TRL_ROLLOUT),
    _k("TRL", "completions/mean_length", "exact", "mean of completion_mask.sum(1) over every gathered row",
       TRL + "::_generate_and_score_completions", causes=_TRL_ROLLOUT),
    _k("TRL", "completions/clipped_ratio", "grpo/rows/truncated_rate",
       "share of gathered rows whose last completion id is neither EOS nor pad (cut at max_completion_length)",
       TRL + "::_generate_and_score_completions", rtol=0.0, noise=_RATE, causes=_TRL_ROLLOUT, scan=True),
    _k("TRL", "completions/mean_terminated_length", "exact",
       "mean length of the rows that ended with EOS (0 when none did)", TRL + "::_generate_and_score_completions",
       causes=_TRL_ROLLOUT),
    _k("TRL", "num_tokens", "exact", "running total of prompt + completion tokens seen (the trainer's "
       "state.num_input_tokens_seen); the last value of the window, not a mean", TRL + "::_generate_and_score_"
       "completions", rtol=0.0, atol=0.5, noise="an integer count: exact", causes=("off_by_one",)),
    # ------------------------------------------------------------------ TRL (per micro-batch entry)
    _k("TRL", "entropy", "exact", "global masked mean of the per-token entropies per micro-batch (sum and count "
       "reduced over ranks), then the flat mean over the window's micro-batches; exact: the mean over optimizer "
       "steps of each step's mean of micro-batch token means", TRL + "::_compute_loss", causes=_TRL_LOSS,
       scan="grpo/entropy/mean"),
    _k("TRL", "kl", "exact", "as entropy, of k3 = exp(ref - logp) - (ref - logp) - 1 (beta != 0), times the "
       "importance weight coef_1 = exp(logp - old) (per token, or per row under importance_sampling_level="
       "'sequence') when use_bias_correction_kl (the default)",
       TRL + "::_compute_loss", causes=_TRL_LOSS),
    *(_k("TRL", f"clip_ratio/{side}_mean", "exact", f"as entropy, of the {what} indicator (token-level ratio "
         "exp(logp - old))", TRL + "::_compute_loss", causes=_TRL_LOSS)
      for side, what in (("low", "ratio < 1 - epsilon_low with A < 0"), ("high", "ratio > 1 + epsilon_high with "
                                                                               "A > 0"), ("region", "low or high"))),
    _k("TRL", "sampling/sampling_logp_difference/mean", "grpo/mismatch/abs_diff_mean",
       "mean |old_per_token_logps - sampling_per_token_logps| over valid tokens (TRL averages the ranks' means: "
       "equal when the ranks hold equal token counts)", TRL + "::_generate_and_score_completions",
       rtol=1e-4, causes=("per_rank_means",), scan=True),
    _k("TRL", "sampling/sampling_logp_difference/max", "grpo/mismatch/abs_diff_max",
       "max |old_per_token_logps - sampling_per_token_logps| over valid tokens and ranks",
       TRL + "::_generate_and_score_completions", scan=True),
    # ------------------------------------------------------------------ verl (the step's metrics in fit)
    _k("verl", "critic/score/mean", "grpo/reward/mean", "mean over non-aborted rows of token_level_scores.sum(-1) "
       "(equals the monitor's reward mean when the rewards are the scores: no KL-in-reward)", VERL_DATA),
    _k("verl", "critic/advantages/mean", "exact", "mean of the advantages over valid response tokens (token-"
       "weighted: rows weigh by length)", VERL_DATA, causes=("definition",)),
    _k("verl", "critic/advantages/max", "exact", "max of the advantages over valid response tokens", VERL_DATA),
    _k("verl", "critic/advantages/min", "exact", "min of the advantages over valid response tokens", VERL_DATA),
    _k("verl", "response_length/mean", "exact", "mean of attention_mask's response part summed per row (aborted "
       "rows, length 0, counted)", VERL_DATA),
    _k("verl", "response_length/clip_ratio", "grpo/rows/truncated_rate",
       "share of rows whose length equals the responses' width (max_response_length); exact: rows cut by any cap "
       "(no EOS), max_model_len included", VERL_DATA, rtol=0.0, noise=_RATE, causes=("missed_cap",), scan=True),
    _k("verl", "actor/entropy", "grpo/entropy/mean", "agg_loss of the old-log-prob pass's entropies under "
       "loss_agg_mode (equal to the token mean under token-mean)", "verl==0.9.1 verl/trainer/ppo/ray_trainer.py::fit",
       causes=("per_rank_means", "accumulation_scaling"), scan=True),
    _k("verl", "actor/entropy_loss", "grpo/entropy/mean", "agg_loss(entropy, token-mean, dp_size, batch_num_tokens) "
       "per micro-batch, a Metric(SUM): summed over accumulation, mean over dp ranks (Metric.aggregate_dp) = the "
       "global token mean of the entropies", "verl==0.9.1 verl/workers/utils/losses.py::ppo_loss, "
       "verl/utils/metric/utils.py::Metric", causes=("dp_sum", "accumulation_scaling")),
    _k("verl", "rollout_corr/kl", "grpo/mismatch/k1_mean",
       "masked mean of rollout_log_probs - old_log_probs = mean of -Delta (same sign)", VERL_ROLLOUT, rtol=1e-4,
       scan=True),
    _k("verl", "rollout_corr/k3_kl", "grpo/mismatch/k3_mean",
       "masked mean of exp(u) - u - 1 with u = old_log_probs - rollout_log_probs = Delta", VERL_ROLLOUT, rtol=1e-4,
       scan=True),
    # ------------------------------------------------------------------ others with an exact counterpart
    _k("SkyRL", "policy_entropy", "grpo/entropy/mean", "masked mean per micro-batch, mean over micro-batches, "
       "all-reduce mean over DP ranks (a mean of means); exact: the global token mean", SKYRL,
       causes=("per_rank_means", "micro_batch_averaging")),
    _k("OpenRLHF", "response_length", "exact", "mean of the samples' response lengths (action_mask.sum(-1))",
       OPENRLHF, causes=("per_rank_means",)),
    _k("OpenRLHF", "reward", "grpo/reward/mean", "mean of the samples' rewards before shaping", OPENRLHF,
       causes=("per_rank_means",)),
    _k("AReaL", "ppo_actor/entropy/avg", "grpo/entropy/mean", "token-weighted mean of the entropies over the "
       "loss mask (stats_tracker denominator = the mask)", AREAL, causes=("per_rank_means",)),
    _k("NeMo-RL", "token_mult_prob_error", "grpo/mismatch/mult_prob_error",
       "masked mean of exp|generation_logprobs - prev_logprobs| over valid tokens", NEMO, rtol=1e-4, scan=True),
)

#: Every audited trainer key, by (framework, key).
TRAINER_KEYS: dict[tuple[str, str], TrainerKey] = {(k.framework, k.key): k for k in _RECORDS}
FRAMEWORKS: tuple[str, ...] = tuple(dict.fromkeys(k.framework for k in _RECORDS))

#: Framework keys with no faithful counterpart in the monitor, and why (they stay in the trainer's dashboard).
NO_COUNTERPART: dict[str, str] = {
    "sampling/importance_sampling_ratio/*": "TRL logs the ratio after truncation or masking (and per sequence in "
                                            "the sequence modes), not the raw token weight exp(Delta)",
    "rollout_corr/rollout_is_*": "verl's importance weights after truncation or rejection",
    "gen_kl_error": "NeMo-RL's KL of the configured reference_policy_kl_type (k3_mean only when it is k3)",
    "clip_ratio/low_min, clip_ratio/high_max": "TRL's min/max over ranks of per-sequence clip means: the monitor "
                                               "keeps token sums, not per-sequence extremes",
    "actor/pg_clipfrac, actor/ppo_kl": "verl computes them inside the policy loss on the micro-batch's current "
                                       "log-probs, after the first update of the mini-batch loop; the monitor "
                                       "observes the tensors at advantage time",
    "policy_loss, actor/pg_loss, loss": "the loss value depends on the aggregation's normaliser; the monitor "
                                        "checks its per-token weights (grpo/weights/), not its value",
    "rewards/<func>/mean, rewards/<func>/std": "per reward function before weighting; the monitor sees the "
                                               "weighted sum (and the components only for multi-reward estimators)",
    "completions/min_length, completions/max_length": "extremes of lengths: the monitor keeps sums, not extremes",
    "critic/rewards/*, critic/returns/*, critic/values/*": "after KL-in-reward or a critic: not observed",
    "response_length/max, response_length/min, prompt_length/*": "extremes and prompt lengths: not observed",
}


def trainer_key(framework: str, key: str) -> TrainerKey:
    """The record of ``framework``'s ``key``, with a worded error naming the known keys.

    >>> trainer_key("TRL", "frac_reward_zero_std").quantity
    'grpo/groups/degenerate_rate'
    """
    try:
        return TRAINER_KEYS[(framework, key)]
    except KeyError:
        known = sorted(k for f, k in TRAINER_KEYS if f == framework)
        if not known:
            raise KeyError(f"unknown framework {framework!r}; expected one of {list(FRAMEWORKS)}") from None
        raise KeyError(f"{framework} key {key!r} is not audited; expected one of {known}") from None
