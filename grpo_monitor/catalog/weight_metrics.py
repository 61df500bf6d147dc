"""What the loss does with the advantages, in the catalogue: ``grpo/weights/*`` (part of
:data:`grpo_monitor.catalog.metrics.METRICS`, which lists them). See ``docs/loss_weights.md``.
"""

from __future__ import annotations

from .record import Metric
from .record import metric as _m


def weight_entries() -> list[Metric]:
    """``grpo/weights/*``: the measured (or derived) per-token weights of the loss, from the step's rows."""
    w = dict(section="Weights", source="observe_loss", needs="advantages, loss (measured; or declare "
             "MonitorConfig(loss_aggregation=...): derived)")
    rows = dict(only_when="every loss row is linked to its rollout group (rows=, or the micro-batch is the rollout)")
    rs = "from the step's per-response rows, copied to the host in the step's one sync (on several ranks: every " \
         "rank's rows)"
    return [
        _m("grpo/weights/measured", "fraction", rs, "mean", "Share of the step's responses whose token weights "
           "were measured (dloss/dlogprobs by autograd) rather than derived from the declared loss_aggregation; "
           "below 1 the loss was not given or autograd was unavailable (said once in the log).", **w),
        _m("grpo/weights/degenerate_share", "fraction", rs, "mean", "Share of the update's total |weight| on tokens "
           "of degenerate (all-equal reward) groups. The reward term gives them none: above 0 a KL term acts on "
           "them (it may) or a stabilizer gave a constant group an advantage (it should not). An entropy bonus "
           "computed from the logits (TRL's) is not part of dloss/dlogprobs and never shows here.",
           panel="where the update goes", **w, **rows),
        _m("grpo/weights/effective_responses", "responses", rs, "mean", "One over the sum of squared "
           "per-response shares of |weight|: how many responses the update really rests on (all equal: the "
           "number of responses).",
           panel="effective responses and questions", **w),
        _m("grpo/weights/effective_questions", "questions", rs, "mean", "One over the sum of squared "
           "per-question shares of |weight|: how many questions the update really rests on.",
           panel="effective responses and questions",
           **w, **rows),
        _m("grpo/weights/top_question_share", "fraction", rs, "max", "The largest share of |weight| one question "
           "takes; near 1 a single prompt drives the step.", panel="where the update goes", summary="max",
           **w, **rows),
        _m("grpo/weights/length_slope", "slope", rs, "mean", "Least-squares slope of log(|weight| of a response / its "
           "|advantage|) on log(its length) over live rows, centred per micro-batch: 0 for per-response means "
           "(seq_mean_token_mean), 1 for token sums (token_mean, Dr. GRPO).", only_when="the live rows of a "
           "micro-batch have two lengths", **w),
        _m("grpo/weights/long_quarter_share", "fraction", rs, "mean", "Share of the update carried by the longest "
           "quarter of responses (ties by order): 0.25 when length does not matter, more when long responses "
           "weigh more.", panel="where the update goes", **w),
        _m("grpo/weights/aggregation_id", "index", "fitted after the sync from the measured rows", "last",
           "The loss aggregation the weights follow, as its index in grpo_monitor.stats.aggregations.AGGREGATIONS "
           "(0 token_mean, 1 seq_mean_token_mean, 2 seq_mean_token_sum, 3 seq_mean_token_sum_norm, 4 "
           "constant_normalizer, 5 token_sum; -1 none fits); the declared one when weights are derived.", **w),
        _m("grpo/weights/response_length", "tokens", rs, "per step", "Valid tokens of the step's live responses (at "
           "most 512, evenly strided), aligned with grpo/weights/response_weight: the report's weight-against-length "
           "figure.", kind="histogram", **w),
        _m("grpo/weights/response_weight", "ratio to the mean", rs, "per step", "The |weight| / |advantage| "
           "of the same responses, scaled to mean 1: flat in length for per-response means, proportional to it "
           "for token sums.",
           kind="histogram", **w),
        _m("grpo/weights/question_share", "fraction", rs, "per step", "Each question's share of the step's |weight| "
           "(at most 512): the per-question weight distribution.", kind="histogram", **w, **rows),
    ]
