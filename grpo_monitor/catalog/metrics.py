"""METRICS: every key the monitor emits, in one place (key -> section, meaning, unit, aggregation).

The records of a metric family (records, readout and report figure in one module) come from
:data:`grpo_monitor.catalog.families.FAMILIES`; the others are listed here and in the
``*_metrics.py`` modules beside it.

The dashboards (:mod:`grpo_monitor.sinks.layout`: ``KNOWN_KEYS``, the W&B workspace, the
TensorBoard custom-scalars layout) and ``docs/metrics.md`` (``python -m grpo_monitor.catalog``)
are generated from it, and ``tests/test_catalog.py`` checks that every key a real run
emits has an entry. A key's value is computed where the entry's ``source`` says; to find
what ``grpo/...`` means, look it up here.

>>> METRICS["grpo/groups/degenerate_rate"].unit
'fraction'
>>> METRICS["grpo/invariants/finite"].section
'Invariants'

Torch-free: importing it costs no more than the invariant registry it derives from
(:data:`grpo_monitor.invariants.INVARIANTS`, one count per invariant).
"""

from __future__ import annotations

import types
from collections.abc import Mapping

from ..invariants import INVARIANTS
from .families import IN_ORDER
from .health_metrics import health_entries
from .record import (  # noqa: F401 - Metric and the phrases are part of this module's interface
    CHECKS,
    FIT,
    HISTORY,
    KINDS,
    MAX,
    MOMENTS,
    RATIO,
    ROWS,
    RUN,
    SOURCES,
    SUM,
    Kind,
    Metric,
    Source,
)
from .record import metric as _m

#: The x axis of every dashboard panel: the monitor's step, logged with each report.
STEP_KEY = "grpo/step"
#: The monitor's own health: how many of its parts are switched off by an internal fault.
DISABLED_PARTS_KEY = "grpo/monitor/disabled_parts"
#: Parts switched off by a fault on the step before and tried again on this one (absent: none).
RETRIED_PARTS_KEY = "grpo/monitor/retried_parts"
#: Reports the background sinks dropped so far in this process (absent: none), so a log says what a dashboard lacks.
DROPPED_REPORTS_KEY = "grpo/monitor/dropped_reports"

#: Sections in display order, with the key prefixes that place a key outside the catalogue.
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Groups", ("grpo/groups/", "grpo/reward/", "grpo/rows/", "grpo/questions", "grpo/offpolicy/")),
    ("Advantages", ("grpo/adv/", "grpo/estimator", "grpo/convention")),
    ("KL", ("grpo/kl/", "grpo/ratio/", "grpo/seq_ratio/")),
    ("Mismatch", ("grpo/mismatch/", "grpo/moe/")),
    ("Entropy", ("grpo/entropy/",)),
    ("Sampling", ("grpo/sampling/",)),
    ("Invariants", ("grpo/invariants/", "grpo/violations", "grpo/trainer_metrics/")),
    ("Tokens", ("grpo/tokens/",)),
    ("Weights", ("grpo/weights/",)),
    ("Monitor", ("grpo/monitor/", "grpo/config")),
    ("Integrations", ("grpo/trl/", "grpo/verl/", "grpo/hf/")),
    ("Health", ("grpo/health/", "grpo/alerts")),
)



def _groups() -> list[Metric]:
    roll = dict(section="Groups", source="observe_rollout")
    iid = "degenerate rate: observed vs iid-predicted"
    wg = "mean weighted by grpo/groups/total"
    return [
        _m("grpo/groups/total", "groups", SUM, "sum", "Groups in the training batch; fewer than you sent "
           "means groups were split across calls or lost.", **roll),
        _m("grpo/groups/degenerate_rate", "fraction", RATIO, wg, "Share of groups whose scorable rewards are all "
           "equal, so the reward term gives them no gradient; near 1 the step teaches nothing.", panel=iid, **roll),
        _m("grpo/groups/degenerate_rate_iid", "fraction", HISTORY, wg, "What independent sampling predicts for the "
           "same groups, mean of p^G + (1-p)^G with p each question's pooled success rate; the observed rate well "
           "above it means responses to one prompt are correlated.", panel=iid,
           needs="question_ids, rewards all 0/1 so far", **roll),
        _m("grpo/groups/effective_prompts", "groups", SUM, "sum", "Groups with reward variation, the prompts the "
           "update is really made of; far below grpo/groups/total means most of the batch is wasted.", **roll),
        _m("grpo/groups/overdispersion", "correlation", HISTORY, "mean", "Intra-group correlation of 0/1 outcomes "
           "given each question's pooled success rate (generated groups when observed, else retained): about 0 for "
           "iid rollouts, above 0 when responses to one prompt share failure modes.",
           needs="question_ids, rewards all 0/1 so far", **roll),
        _m("grpo/reward/mean", "reward units", RATIO, "mean weighted by scorable rows", "Mean reward over the "
           "scorable (non-NaN) rows of the training batch: the run's learning curve.", **roll),
        _m("grpo/reward/question_std_mean", "reward units", RATIO, wg, "Mean over groups of the population std of "
           "their rewards; near 0 means most groups are degenerate.", **roll),
        _m("grpo/rows/unscorable", "rows", SUM, "sum", "Rows whose reward is NaN (unscorable); a rise means the "
           "verifier is failing or timing out.", **roll),
        _m("grpo/reward/question_std", "reward units", ROWS, "one histogram per step", "Population std of the "
           "rewards of each retained group; a spike at 0 is the degenerate share.", kind="histogram", **roll),
        _m("grpo/questions", "one row per question", HISTORY, "the latest table", "Per-question table (success "
           "rate, reward std, times seen, times filtered; its degenerate groups all unsolved, all solved and other "
           "(degenerate_low/high/other, split as grpo/groups/degenerate_*_rate); truncated_rate and "
           "degenerate_truncated where truncation is given; most filtered first) every table_every steps; a question "
           "filtered in every attempt is stuck.", kind="table", needs="question_ids", **roll),
    ]


def _advantages() -> list[Metric]:
    adv = dict(section="Advantages", source="observe_rollout", needs="advantages")
    wl = "mean weighted by grpo/groups/effective_prompts"
    both = "advantages over rows: mean and std"
    return [
        _m("grpo/adv/mean", "advantage units", MOMENTS, "mean weighted by rows", "Mean advantage over rows; about "
           "0 when advantages are centred per group, away from 0 when a group mean was not subtracted.",
           panel=both, **adv),
        _m("grpo/adv/std", "advantage units", MOMENTS, "mean (stds do not add exactly)", "Population std of the "
           "advantages over rows, degenerate groups' zeros included; a jump means the scaling changed.",
           panel=both, **adv),
        _m("grpo/adv/group_mean_abs_max", "advantage units", MAX, "max", "Largest |mean advantage| of a group with "
           "reward variation: 0 when centred per group; above tolerance means a wrong axis or misaligned rows.", **adv),
        _m("grpo/adv/live_std_mean", "advantage units", RATIO, wl, "Mean over live groups of the population std of "
           "their advantages: 1 for population z-scores, sqrt((G-1)/G) for Bessel; else another convention.", **adv),
        _m("grpo/adv/degenerate_abs_max", "advantage units", MAX, "max", "Largest |advantage| in a group whose "
           "rewards are all equal: 0 unless a stabilizer or a misaligned batch gives such a group a gradient.", **adv),
        _m("grpo/adv/convention_scale", "ratio", RATIO, wl, "Mean over live groups of k_g * std_g, the advantage "
           "scale in units of the group's reward std (about 1 for population z-scores); a drift means the "
           "scaling changed.", **adv),
        _m("grpo/adv/estimator_id", "id", FIT, "last (constant in a healthy run)", "Stable id of the "
           "estimator in use (grpo_monitor.estimators.ESTIMATOR_IDS: declared, or found by 'auto'; the name is "
           "StepReport.estimator; the classic five are 0-4; an id never changes); -2 for your own estimator "
           "(estimators.custom), -1 when none is named (none fits, or an unknown_estimator warning).", **adv),
        _m("grpo/adv/convention_id", "id", FIT, "last (constant in a healthy run)", "Deprecated: "
           "grpo/adv/estimator_id under its 0.1 name, emitted beside it with the same value for the dashboards "
           "built on it.", alias_of="grpo/adv/estimator_id", **adv),
        _m("grpo/adv/stabilizer", "reward units", FIT, "last (constant in a healthy run)", "The fitted epsilon of "
           "1/k_g = base_g + epsilon (under a batch std: 1/k = batch std + epsilon); large next to the reward std, "
           "it flattens low-variance groups' advantages. Exactly 0 for none and leave_one_out (no free stabilizer).",
           only_when="an estimator with a group or batch scale (or none/leave_one_out: 0) is named", **adv),
        _m("grpo/adv/values", "advantage units", ROWS, "one histogram per step", "Finite advantages of up to "
           "1,024 rows sampled evenly; a shape other than a symmetric spread around 0 means a broken estimator.",
           kind="histogram", **adv),
        _m("grpo/estimator", "name", FIT, "last", "Name of the estimator in use (StepReport.estimator), in the "
           "W&B run summary (absent while none is named).", kind="text",
           only_when="a W&B run (its run summary; every other sink has StepReport.estimator)", **adv),
        _m("grpo/convention", "name", FIT, "last", "Deprecated: grpo/estimator under its 0.1 name, written beside it "
           "in the W&B run summary for the dashboards built on it.", kind="text", alias_of="grpo/estimator", **adv),
    ]


_KL_ESTIMATORS = {
    "k1": "k1 = -u, u = ref_logprobs - logprobs (unbiased for KL(policy || ref), noisy, signed)",
    "k2": "k2 = u^2 / 2 (never negative, low variance, biased for large u)",
    "k3": "k3 = exp(u) - u - 1 (unbiased, never negative: the usual GRPO penalty)",
}
_KL_STATS = {  # stat -> (unit, aggregation, over steps, meaning with {est} for the estimator)
    "mean": ("nats", MOMENTS, "mean weighted by grpo/tokens/valid", "Mean over valid tokens of {est}; a steady "
             "climb means the policy drifts from the reference."),
    "std": ("nats", MOMENTS, "mean (stds do not add exactly)", "Population std over valid tokens of {est}; large "
            "next to the mean, a few tokens carry the penalty."),
    "neg_frac": ("fraction", RATIO, "mean weighted by grpo/tokens/valid", "Share of valid tokens where {est} is "
                 "negative; only k1 can be, k2 and k3 report 0."),
    "max": ("nats", MAX, "max", "Largest value over valid tokens of {est}; a spike flags single tokens with a "
            "runaway log-ratio (check masking and padding)."),
}


def _kl() -> list[Metric]:
    """The three KL estimators x four statistics, then the trainer's own KL and the importance ratio."""
    kl = dict(section="KL", source="observe_loss")
    out = [
        _m(f"grpo/kl/{k}_{s}", unit, agg, steps, meaning.format(est=est), panel=f"KL estimators: {s}",
           needs="logprobs, ref_logprobs", constant=0.0 if s == "neg_frac" and k != "k1" else None, **kl)
        for s, (unit, agg, steps, meaning) in _KL_STATS.items() for k, est in _KL_ESTIMATORS.items()
    ]
    user, tokens = "kl, logprobs, ref_logprobs", "mean weighted by grpo/tokens/valid"
    return out + [
        _m("grpo/kl/user_mean", "nats", MOMENTS, tokens, "Mean over valid tokens of the trainer's own per-token "
           "KL (kl=); should track the estimator the trainer claims to use.", needs="kl", **kl),
        _m("grpo/kl/user_std", "nats", MOMENTS, "mean (stds do not add exactly)", "Population std over valid "
           "tokens of the trainer's own per-token KL (kl=).", needs="kl", **kl),
        _m("grpo/kl/user_k3_max_abs_diff", "nats", MAX, "max", "Largest |kl - k3| over valid tokens; above "
           "rounding noise the trainer's KL is not k3 of the same log-probs (other estimator, stale reference, "
           "clamp).", needs=user, **kl),
        _m("grpo/kl/user_clamp_frac", "fraction", RATIO, tokens, "Share of valid tokens whose kl= sits at a "
           "kl_clamp bound; above 0 the clamp is cutting the penalty.", needs="kl; MonitorConfig.kl_clamp set", **kl),
        _m("grpo/ratio/mean", "ratio", RATIO, tokens, "Mean importance ratio exp(logprobs - old_logprobs) over "
           "valid tokens; 1 on the first inner epoch, far from 1 means stale or mismatched old log-probs.",
           needs="logprobs, old_logprobs", **kl),
        _m("grpo/ratio/log_abs_max", "nats", MAX, "max", "Largest |logprobs - old_logprobs| over valid tokens; "
           "above on_policy tolerance on a first epoch means the sampler and trainer disagree.",
           needs="logprobs, old_logprobs", **kl),
        _m("grpo/ratio/clip_frac", "fraction", RATIO, tokens, "Share of valid tokens whose ratio lies outside "
           "[1-low, 1+high] (clip_range); high values mean the update leaves the trust region.",
           needs="logprobs, old_logprobs", **kl),
    ]


def _sampling() -> list[Metric]:
    gen = dict(section="Sampling", source="observe_generation")
    counts, rg = "groups: generated / retained / discarded", "mean weighted by grpo/sampling/retained_groups"
    iid, totals = "generated degenerate rate: observed vs iid-predicted", "run totals: groups"
    total = "last (already a running total)"
    return [
        _m("grpo/sampling/generation_batches", "calls", "calls counted on each rank, max over ranks", "sum",
           "Calls to observe_generation (rounds) this step: the retries dynamic sampling needed to fill the batch.",
           **gen),
        _m("grpo/sampling/generated_groups", "groups", SUM, "sum", "Groups generated this step, discarded ones "
           "included.", panel=counts, **gen),
        _m("grpo/sampling/generated_responses", "responses", SUM, "sum", "Responses generated this step, "
           "discarded ones included: the sampling compute.", **gen),
        _m("grpo/sampling/retained_groups", "groups", SUM, "sum", "Groups kept for training (grpo/groups/total "
           "of the same step).", panel=counts, **gen),
        _m("grpo/sampling/discarded_groups", "groups", SUM, "sum", "Generated groups not trained on; negative "
           "means more groups were trained on than generated (a missed observe_generation call).",
           panel=counts, **gen),
        _m("grpo/sampling/retention_rate", "fraction", RATIO, "mean weighted by grpo/sampling/generated_groups",
           "Retained / generated groups; falling towards 0, dynamic sampling discards almost everything.", **gen),
        _m("grpo/sampling/responses_per_retained_group", "responses", RATIO, rg, "Generated responses per "
           "retained group, failed retries included (theory: G / retention); the real price of a training group.",
           **gen),
        _m("grpo/sampling/generated_degenerate_rate", "fraction", RATIO, "mean weighted by "
           "grpo/sampling/generated_groups", "Degenerate share of every generated group (before filtering).",
           panel=iid, **gen),
        _m("grpo/sampling/degenerate_rate_iid", "fraction", HISTORY, "mean weighted by "
           "grpo/sampling/generated_groups", "The iid prediction of the generated degenerate rate from the pooled "
           "per-question success rates; the observed rate well above it means correlated responses.", panel=iid,
           needs="question_ids, rewards all 0/1 so far", **gen),
        _m("grpo/sampling/generated_tokens", "tokens", SUM, "sum", "Tokens generated this step, discarded groups "
           "included.", needs="lengths", **gen),
        _m("grpo/sampling/tokens_per_retained_group", "tokens", RATIO, rg, "Generated tokens per retained group, "
           "failed retries included.", needs="lengths", **gen),
        _m("grpo/sampling/stuck_questions", "questions", HISTORY, "last", "Questions filtered out in every attempt "
           "for stuck_after steps (ids in report.flagged_questions); they cost compute and never train.",
           needs="question_ids", **gen),
        _m("grpo/sampling/total_generated_groups", "groups", RUN, total, "Groups generated since the run began.",
           panel=totals, **gen),
        _m("grpo/sampling/total_retained_groups", "groups", RUN, total, "Groups trained on since the run began.",
           panel=totals, **gen),
        _m("grpo/sampling/total_generated_responses", "responses", RUN, total, "Responses generated since the run "
           "began.", **gen),
    ]


def _invariants() -> list[Metric]:
    """The violation total, one count per invariant of ``INVARIANTS``, and the violation text."""
    inv = dict(section="Invariants", source="end_step", summary="max")
    per = [
        _m(f"grpo/invariants/{name}", "violations", CHECKS, "sum", f"Breaches of '{name}' this step: "
           f"{record}.", panel="violations per invariant",
           only_when=f"'{name}' breaks this step", **inv)
        for name, record in INVARIANTS.items()  # str(record): the invariant's statement
    ]
    return [
        _m("grpo/invariants/violations", "violations", CHECKS, "sum", "Invariant breaches this step (errors and "
           "warnings), all invariants together; above 0 the pipeline has a bug or a suspect batch (see the "
           "per-invariant counts and the messages).", **inv),
        *per,
        _m("grpo/violations", "markdown", CHECKS, "one entry per step with violations", "The step's violation "
           "messages as markdown text (TensorBoard).", kind="text", only_when="the step has violations", **inv),
        _m("grpo/trainer_metrics/mismatched", "keys", "host-side count after the sync", "sum", "Trainer-logged "
           "keys whose value is off the exact value of the same step beyond their tolerance (one trainer_metric "
           "warning each; docs/trainer_metrics.md).", only_when="the trainer's values were audited this step "
           "(an integration or audit_trainer_metrics)", **inv),
    ]


def _tokens() -> list[Metric]:
    tok = dict(section="Tokens", source="observe_loss")
    valid = "mean weighted by grpo/tokens/valid"
    return [
        _m("grpo/tokens/valid", "tokens", SUM, "sum", "Tokens with mask 1, the tokens the loss is taken over.",
           **tok),
        _m("grpo/tokens/rows", "rows", SUM, "sum", "Rows with at least one valid token; fewer than the batch's "
           "rows means empty responses or a mask that drops them.", **tok),
        _m("grpo/tokens/response_length_mean", "tokens", RATIO, "mean weighted by grpo/tokens/rows", "Mean valid "
           "tokens per row with tokens: the response length.", **tok),
        _m("grpo/tokens/mask_nonbinary", "tokens", SUM, "sum", "Mask entries other than 0 and 1 (mask_binary); "
           "above 0 the loss is weighted per token, usually by accident.", **tok),
        _m("grpo/tokens/live_fraction", "fraction", RATIO, valid, "Share of valid tokens in rows with nonzero "
           "advantage: the compute that carried gradient.", needs="advantages", **tok),
        _m("grpo/tokens/adv_mean", "advantage units", RATIO, valid, "Mean advantage over valid tokens; unlike "
           "grpo/adv/mean it weights rows by length.", needs="advantages", **tok),
        _m("grpo/tokens/adv_abs_mean", "advantage units", RATIO, valid, "Mean |advantage| over valid tokens, "
           "the typical gradient weight of a token.", needs="advantages", **tok),
        _m("grpo/tokens/adv_row_spread_max", "advantage units", MAX, "max", "Largest within-row spread of token "
           "advantages; with outcome rewards it is 0, else advantages are shifted along the sequence.",
           needs="advantages", **tok),
        _m("grpo/tokens/logprob_nonfinite", "tokens", SUM, "sum", "Non-finite log-probs on valid tokens "
           "(finite_logprobs); above 0 means overflow or padding inside the mask.", needs="logprobs", **tok),
    ]


def _monitor_and_integrations() -> list[Metric]:
    trl = dict(section="Integrations", source="integration", needs="the TRL integration")
    return [
        _m("grpo/config", "markdown", "written once per run by the sink", "one entry per run", "The run's "
           "MonitorConfig and declared estimator as run parameters (TensorBoard text; W&B config, MLflow params, "
           "Trackio config elsewhere).", kind="text", section="Monitor", source="end_step"),
        _m(DISABLED_PARTS_KEY, "parts", "host-side count of this process", "last", "Parts of the "
           "monitor switched off by an internal fault (fail-open); above 0 some checks no longer run.",
           section="Monitor", source="end_step"),
        _m(RETRIED_PARTS_KEY, "parts", "host-side count of this process", "sum", "Parts switched off by an "
           "internal fault on an earlier step and tried again on this one (absent: none); a part faulting on "
           "3 steps in a row stays off.", only_when="a part is tried again after a fault", section="Monitor",
           source="end_step"),
        _m(DROPPED_REPORTS_KEY, "reports", "host-side count of this process, over the run so far", "last",
           "Step reports a blocked background sink (W&B, TensorBoard, console) dropped so far (absent: none); "
           "those steps are missing from that sink, not from the JSONL log.",
           only_when="a background sink dropped a report", section="Monitor", source="end_step"),
        _m("grpo/trl/frac_reward_zero_std", "fraction", "TRL's own value, averaged over the step's rollouts",
           "mean", "TRL's frac_reward_zero_std of the step.", **trl),
        _m("grpo/trl/frac_reward_zero_std_gap", "fraction", "exact degenerate rate minus TRL's, per step", "mean",
           "The monitor's exact degenerate rate minus TRL's frac_reward_zero_std; away from 0 TRL's number "
           "is off (e.g. scale_rewards='batch').", **trl),
        *(_m(f"grpo/trl/clip_ratio_{side}", "fraction", "clipped valid tokens / valid tokens over the step",
             "mean", f"TRL's clip_ratio/{side}_mean, recomputed: {text}; compare with TRL's log "
             "(grpo/ratio/clip_frac is the symmetric fraction).", panel="TRL clip ratios", **trl)
          for side, text in (("low", "ratio below 1 - epsilon_low on a negative advantage"),
                             ("high", "ratio above 1 + epsilon_high on a positive advantage"),
                             ("region", "either of the two"))),
    ]


def _catalogue() -> Mapping[str, Metric]:
    families = [m for family in IN_ORDER for m in family.metrics]  # each family's records, in its sections
    entries = [*_groups(), *_advantages(), *_kl(), *families,
               *_sampling(), *_invariants(), *_tokens(),
               *_monitor_and_integrations(), *health_entries()]
    order = [name for name, _ in SECTIONS]
    entries.sort(key=lambda m: order.index(m.section))  # stable: section order, then listed order
    out: dict[str, Metric] = {}
    for m in entries:
        if m.key in out:
            raise ValueError(f"metric key {m.key!r} is catalogued twice")
        if m.kind not in KINDS or m.source not in SOURCES:
            raise ValueError(f"metric {m.key!r} has kind {m.kind!r}, source {m.source!r}; expected {KINDS}, {SOURCES}")
        out[m.key] = m
    return types.MappingProxyType(out)


#: Every key the monitor emits: key -> :class:`Metric`, in section display order.
METRICS: Mapping[str, Metric] = _catalogue()

#: The ``grpo/<name>`` parts of the key space the monitor writes itself (every catalogued key but the
#: integrations', and the step axis): ``GRPOMonitor.add_metrics`` refuses user keys in them.
MONITOR_SECTIONS: tuple[str, ...] = tuple(sorted(
    {key.split("/")[1] for key, m in METRICS.items() if m.source != "integration"} | {STEP_KEY.split("/")[1]}))


def section_of(key: str) -> str | None:
    """A key's section: its entry's, else the one its prefix names; None outside every section.

    >>> section_of("grpo/ratio/clip_frac"), section_of("grpo/invariants/brand_new"), section_of("lr")
    ('KL', 'Invariants', None)
    """
    if key in METRICS:
        return METRICS[key].section
    for section, prefixes in SECTIONS:
        if key.startswith(prefixes):
            return section
    return None


def summary_for(key: str) -> str:
    """Run-summary aggregate of a scalar: its entry's; for an uncatalogued key, ``max`` for violation counts.

    >>> summary_for("grpo/invariants/violations"), summary_for("grpo/groups/total")
    ('max', 'last')
    """
    if key in METRICS:
        return METRICS[key].summary
    return "max" if key.startswith("grpo/invariants/") else "last"
