"""Off-policy updates in the catalogue: GSPO's sequence ratio ``grpo/seq_ratio/*`` (part of
:data:`grpo_monitor.catalog.metrics.METRICS`, which lists them).

Per row with valid tokens, w = exp(m) with m the mean over the row's valid tokens of
``logprobs - old_logprobs``: the sequence-level importance ratio GSPO clips (TRL's
``importance_sampling_level="sequence"``, verl's ``gspo`` loss). The framework key each one
matches is in its meaning (docs/async_moe.md).
"""

from __future__ import annotations

from .record import Metric
from .record import metric as _m

_ROWS = "mean weighted by rows"
_NEEDS = "logprobs, old_logprobs"


def seq_ratio_entries() -> list[Metric]:
    """``grpo/seq_ratio/*``: per-row sums and extremes of the fused token pass, reduced once per step."""
    seq = dict(section="KL", source="observe_loss", needs=_NEEDS)
    dist = "sequence ratio w = exp(mean log ratio of a row): min / mean / max"
    rows = "ratio of per-row counts over micro-batches and ranks"
    return [
        _m("grpo/seq_ratio/mean", "ratio", "ratio of per-row sums of w over micro-batches and ranks", _ROWS,
           "Mean over rows of GSPO's sequence ratio w (TRL's coef_1 under importance_sampling_level='sequence', "
           "verl's gspo seq_importance_ratio): 1 on a first inner epoch, drifting with stale old log-probs.",
           panel=dist, **seq),
        _m("grpo/seq_ratio/min", "ratio", "min over micro-batches and ranks (of the row's mean log ratio)", "min",
           "Smallest w over rows.", panel=dist, **seq),
        _m("grpo/seq_ratio/max", "ratio", "max over micro-batches and ranks (of the row's mean log ratio)", "max",
           "Largest w over rows.", panel=dist, **seq),
        _m("grpo/seq_ratio/ess", "fraction", "from per-row sums of w and w^2 over micro-batches and ranks",
           "mean", "Normalised effective sample size (sum w)^2 / (n sum w^2) of the sequence ratios: 1 when every "
           "row has the same weight, towards 1/n when a few rows carry the update.", **seq),
        _m("grpo/seq_ratio/clip_frac", "fraction", rows, _ROWS, "Share of rows whose w lies outside [1-low, "
           "1+high] (clip_range; TRL's epsilon / epsilon_high, read by the TRL integration): the rows GSPO's "
           "clip stops; TRL logs clip_ratio/region_mean only per token.", **seq),
        _m("grpo/seq_ratio/tail_frac", "fraction", rows, _ROWS, "Share of rows whose w lies outside "
           "[mismatch_ratio_low, mismatch_ratio_high] (default [0.5, 2]): rows far off-policy, whatever the clip.",
           **seq),
    ]


def age_entries() -> list[Metric]:
    """``grpo/offpolicy/*``: the rows' ages (trained version - ``policy_version``), slots of the rollout vector."""
    age = dict(section="Groups", source="observe_rollout", needs="policy_version (trained_version: default the step)")
    rows, share = "ratio of sums over calls and ranks", "mean weighted by rows"
    out = [
        _m("grpo/offpolicy/age_mean", "versions", rows, share, "Mean age of the training rows, trained version "
           "minus the version of the weights that generated each: verl's training/off_policy/trajectory_staleness, "
           "AReaL's sample_staleness, prime-rl's off_policy/mean, NeMo-RL's avg_trajectory_age. Above 0 the "
           "mismatch check treats the sampler's lag as declared.", **age),
        _m("grpo/offpolicy/age_max", "versions", "max over calls and ranks", "max", "Largest age of a training row "
           "(prime-rl's off_policy/max; AReaL bounds it by max_head_offpolicyness).", **age),
    ]
    for a, label in ((0, "0"), (1, "1"), (2, "2"), (3, "3plus")):
        what = "3 or more" if a == 3 else str(a)
        out.append(_m(f"grpo/offpolicy/age_frac_{label}", "fraction", rows, share, f"Share of training rows of "
                      f"age {what}: the age histogram.", panel="age histogram: share of rows by age", **age))
    return out


def drop_entries() -> list[Metric]:
    """``grpo/offpolicy/drop*``: the staleness drop's selection bias, slots of the generation ledger."""
    drop = dict(section="Groups", source="observe_generation", needs="dropped (lengths for the length test)")
    rows, share = "ratio of sums over calls and ranks", "mean weighted by generated rows"
    z = "from per-side sums and per-group moments over calls and ranks"
    only = "fewer than 8 scorable rows on either side"
    out = [
        _m("grpo/offpolicy/dropped_frac", "fraction", rows, share, "Share of the generated (scorable) rows dropped "
           "before training, as observe_generation(dropped=) marks them: verl's evicted samples, prime-rl's "
           "off_policy/dropped.", **drop),
        _m("grpo/offpolicy/dropped_reward_mean", "reward", rows, share, "Mean reward of the dropped rows.",
           panel="staleness drop: reward of dropped vs kept rows", only_when="no row dropped", **drop),
        _m("grpo/offpolicy/kept_reward_mean", "reward", rows, share, "Mean reward of the kept rows.",
           panel="staleness drop: reward of dropped vs kept rows", only_when="every row dropped", **drop),
    ]
    for q, what in (("reward", "mean reward"), ("pass", "pass rate (reward > 0)"), ("length", "mean length")):
        out.append(_m(f"grpo/offpolicy/drop_{q}_z", "standard errors", z, "mean", f"Dropped minus kept {what} "
                      "in cluster-robust standard errors (groups as clusters); about N(0, 1) when the drop does not "
                      "depend on the rows.", panel="staleness drop: z of dropped vs kept",
                      only_when=only + ("; no lengths" if q == "length" else ""), **drop))
    out += [
        _m("grpo/offpolicy/drop_bias_z", "standard errors", z, "max", "Largest |z| of the three: selection bias "
           "of the drop (dropping slow, hard problems biases training towards fast, easy ones).", summary="max",
           only_when=only, **drop),
        _m("grpo/offpolicy/drop_biased", "flag", "from drop_bias_z", "max", "Flag: 1 when drop_bias_z > 3.5 (random "
           "drops: 0.07% of steps with row drops, 0.6% with whole-group drops; a reward-dependent delay: 94%; "
           "docs/async_moe.md).", summary="max", only_when=only, **drop),
    ]
    return out
