"""The off-policy family in one place (:data:`OFFPOLICY`): the rows' ages ``grpo/offpolicy/age_*``, the staleness
drop's selection bias ``grpo/offpolicy/drop*`` and GSPO's sequence ratio ``grpo/seq_ratio/*`` — their records,
their readout from the synced sums and the report figure they declare.

Ages are slots of the rollout vector (``stats/staleness.py``), the drop's per-side sums slots of the
generation ledger (``stats/drop_bias.py``), the sequence ratio slots of the token pass
(``stats/tokens/table.py``). Per row with valid tokens, w = exp(m) with m the mean over the row's valid
tokens of ``logprobs - old_logprobs``: the sequence-level importance ratio GSPO clips (TRL's
``importance_sampling_level="sequence"``, verl's ``gspo`` loss). The framework key each one matches is in
its meaning (docs/async_moe.md).

>>> from grpo_monitor.catalog.family import read_out
>>> read_out([OFFPOLICY], "rollout", {"age_rows": 4.0, "age_sum": 6.0, "age_max": 4.0, "age_min": 0.0,
...                                   "age_0": 1.0, "age_1": 2.0, "age_2": 0.0, "age_3": 1.0})["grpo/offpolicy/age_min"]
0.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .family import Family, FigureSpec, Panel, Readout
from .record import Metric
from .record import metric as _m

#: Ages with a histogram bin of their own; the last bin holds every age from ``AGE_BINS - 1`` up.
AGE_BINS = 4
#: |z| above which a difference counts as selection bias: two-sided 5e-4 per quantity under the normal
#: approximation (about 1.5e-3 per step over three quantities); at least ``MIN_ROWS`` rows on each side.
Z_FLAG, MIN_ROWS = 3.5, 8

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
        _m("grpo/offpolicy/age_min", "versions", "min over calls and ranks", "min", "Smallest age of a training row: "
           "above 0 not one row of the step came from the weights being trained (the whole batch is stale, as in a "
           "fully asynchronous trainer); 0 with age_max above 0, the batch mixes versions.", **age),
    ]
    for a, label in ((0, "0"), (1, "1"), (2, "2"), (3, "3plus")):
        what = "3 or more" if a == AGE_BINS - 1 else str(a)
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


# --- the readouts: plain floats of the synced slots -----------------------------------------------------------


def age_metrics(v: Mapping[str, float]) -> dict[str, float]:
    """``grpo/offpolicy/age_{mean,max,min}`` and the share of rows at each age (``age_frac_{0,1,2,3plus}``)."""
    n = v["age_rows"]
    out = {"grpo/offpolicy/age_mean": v["age_sum"] / n, "grpo/offpolicy/age_max": v["age_max"]}
    for a in range(AGE_BINS):
        suffix = f"{a}plus" if a == AGE_BINS - 1 else str(a)
        out[f"grpo/offpolicy/age_frac_{suffix}"] = v[f"age_{a}"] / n
    out["grpo/offpolicy/age_min"] = v["age_min"]
    return out


Side = tuple[float, float, float, float, float, float]


def cluster_z(d: Side, k: Side) -> float:
    """(mean_d - mean_k) / se with each mean's cluster-robust variance C/(C-1) sum_g (s_g - m n_g)^2 / N^2 (groups
    as clusters: rows of one prompt share its difficulty; C the side's groups), from (N, C, sum, sum_g s_g^2,
    sum_g s_g n_g, sum_g n_g^2) per side; 0 when both sides are constant and equal, +-inf when constant and
    different."""
    def mean_var(n: float, c: float, s: float, gsq: float, gsn: float, ngsq: float) -> tuple[float, float]:
        m = s / n
        return m, max(gsq - 2 * m * gsn + m * m * ngsq, 0.0) / (n * n) * c / max(c - 1, 1.0)

    (m1, v1), (m2, v2) = mean_var(*d), mean_var(*k)
    se = math.sqrt(v1 + v2)
    if se > 0:
        return (m1 - m2) / se
    return 0.0 if m1 == m2 else math.copysign(math.inf, m1 - m2)


def drop_metrics(v: Mapping[str, float]) -> dict[str, float]:
    """``grpo/offpolicy/dropped_*`` of merged ledger slots: present once a call declared its dropped rows."""
    nd, nk = v["drop_rows"], v["keep_rows"]
    out = {"grpo/offpolicy/dropped_frac": nd / (nd + nk)}
    if nd > 0:
        out["grpo/offpolicy/dropped_reward_mean"] = v["drop_reward_sum"] / nd
    if nk > 0:
        out["grpo/offpolicy/kept_reward_mean"] = v["keep_reward_sum"] / nk
    if min(nd, nk) < MIN_ROWS or min(v["drop_groups"], v["keep_groups"]) < 2:
        return out
    zs = {name: cluster_z(_side(v, "drop", q), _side(v, "keep", q)) for name, q in (("reward", "reward"),
                                                                                  ("pass", "pass"))}
    if min(v["drop_len_rows"], v["keep_len_rows"]) >= MIN_ROWS:
        zs["length"] = cluster_z(_side(v, "drop", "len", "len_"), _side(v, "keep", "len", "len_"))
    out.update({f"grpo/offpolicy/drop_{k}_z": z for k, z in zs.items()})
    worst = max(abs(z) for z in zs.values())
    out["grpo/offpolicy/drop_bias_z"] = worst
    out["grpo/offpolicy/drop_biased"] = float(worst > Z_FLAG)
    return out


def _drop_readout(v: Mapping[str, float]) -> dict[str, float]:
    """:func:`drop_metrics` once some call declared dropped rows (``observe_generation(dropped=)``)."""
    return drop_metrics(v) if v["drop_rows"] + v["keep_rows"] > 0 else {}


def _side(v: Mapping[str, float], side: str, q: str, rows: str = "") -> Side:
    return (v[f"{side}_{rows}rows"], v[f"{side}_groups"], v[f"{side}_{q}_sum"], v[f"{side}_{q}_gsq"],
            v[f"{side}_{q}_gsn"], v[f"{side}_{rows}ngsq"])


def seq_ratio_metrics(v: Mapping[str, float]) -> dict[str, float]:
    """``grpo/seq_ratio/{min,max,ess}`` from the slots of GSPO's sequence ratio w = exp(mean log ratio of a row)
    (``mean``, ``clip_frac`` and ``tail_frac`` are single slots, reported by the token field table)."""
    rows, w, w2 = v["seq_rows"], v["seq_w_sum"], v["seq_w_sq_sum"]
    return {
        "grpo/seq_ratio/min": exp_or_inf(v["seq_log_min"]),
        "grpo/seq_ratio/max": exp_or_inf(v["seq_log_max"]),
        "grpo/seq_ratio/ess": w * w / (rows * w2) if w2 > 0 else math.nan,
    }


def exp_or_inf(x: float) -> float:
    """exp(x) in float64, inf past the overflow (NaN stays NaN)."""
    return math.exp(x) if x < 709 else (x if math.isnan(x) else math.inf)


# --- the figure it declares ---------------------------------------------------------------------------------------

_AGES = tuple(f"grpo/offpolicy/age_frac_{s}" for s in ("0", "1", "2", "3plus"))
_Z = ("grpo/offpolicy/drop_bias_z", "grpo/offpolicy/drop_reward_z", "grpo/offpolicy/drop_pass_z",
      "grpo/offpolicy/drop_length_z")
FIGURE = FigureSpec(
    "offpolicy", "Off-policy rows: ages and the staleness drop",
    panels=(
        Panel("fractions", _AGES, "Age of the training rows (trained version - policy_version), stacked",
              "share of rows", labels=("age 0 (on-policy)", "age 1", "age 2", "age 3 or more"),
              colors=("green", "blue", "orange", "red"), share=True),
        Panel("lines", ("grpo/offpolicy/age_mean",), "Mean age of the training rows", "versions",
              labels=("mean age (grpo/offpolicy/age_mean)",), min_span=1.0),
        Panel("lines", _Z, "Staleness drop: dropped minus kept rows, in cluster-robust standard errors",
              "standard errors", labels=("largest |z| (drop_bias_z)", "reward z", "pass-rate z", "length z"),
              colors=("red", "blue", "green", "orange"),
              references=((Z_FLAG, f"drop_biased: |z| above {Z_FLAG:g}"), (-Z_FLAG, "")),
              min_span=2 * Z_FLAG),
    ),
    caption="The age of each training row, trained version minus the version of the weights that generated it (the "
            "stack: shares of rows by age; all at age 0 is on-policy), and, for a trainer that drops stale rows "
            f"(observe_generation(dropped=)), how the dropped rows differ from the kept ones: above |z| = {Z_FLAG:g} "
            "the drop is biased towards some rows (docs/async_moe.md)",
    statements=(("the mean age", "grpo/offpolicy/age_mean", "{:.2f}"),
                ("the share of on-policy rows (age 0)", "grpo/offpolicy/age_frac_0", "{:.1%}"),
                ("the share of dropped rows", "grpo/offpolicy/dropped_frac", "{:.1%}"),
                ("the drop's largest |z|", "grpo/offpolicy/drop_bias_z", "{:.2f}")),
    after="ratio", note=False)

#: The family: records, readouts (the rollout's ages, the ledger's drops, the token pass's sequence ratios),
#: its figure and its scan rows.
OFFPOLICY = Family(
    "offpolicy", (*age_entries(), *drop_entries(), *seq_ratio_entries()),
    readouts=(Readout("rollout", "age_rows", age_metrics), Readout("ledger", "", _drop_readout),
              Readout("tokens", "seq_rows", seq_ratio_metrics)),
    figures=(FIGURE,),
    trends=(("row age (versions)", "grpo/offpolicy/age_mean", "{:.2f}"),
            ("dropped rows", "grpo/offpolicy/dropped_frac", "{:.1%}")))
