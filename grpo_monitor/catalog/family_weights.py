"""The token weights family in one place (:data:`WEIGHTS`): what the loss does with the advantages
(``grpo/weights/*``) — its records, the loss aggregations' table its figure draws slopes by, and the report figure it
declares. See ``docs/loss_weights.md``.

Its values are not a readout of synced slots: they come from the step's per-response rows, copied to the host in
the step's one sync (on several ranks: every rank's rows), fitted and summed there (``stats/weights.py::
weight_metrics``, called by ``step/weights.py``), so the family declares no :class:`~.family.Readout`.

>>> [p.kind for p in FIGURE.panels], LENGTH_POWERS["seq_mean_token_mean"], AGGREGATION_ALIASES["trl.dapo"]
(['scatter', 'histogram'], 0.0, ('token_mean', 'step'))
"""

from __future__ import annotations

from collections.abc import Mapping

from .family import Family, FigureSpec, Panel, Slope
from .record import Metric
from .record import metric as _m

#: Each loss aggregation, in the order of its index (``grpo/weights/aggregation_id``), with the power of a response's
#: length that its |weight| / |advantage| follows: 0 when the coefficient carries 1 / length (a per-response mean),
#: 1 for token sums. The one home of these names and powers: ``stats/aggregations.py`` builds its records from it
#: and the figure draws its slopes by it.
LENGTH_POWERS: Mapping[str, float] = {"token_mean": 1.0, "seq_mean_token_mean": 0.0, "seq_mean_token_sum": 1.0,
                                      "seq_mean_token_sum_norm": 1.0, "constant_normalizer": 1.0, "token_sum": 1.0}
_ALIASES: dict[str, tuple[str, str]] = {
    "trl.grpo": ("seq_mean_token_mean", "micro_batch"),
    "trl.sapo": ("seq_mean_token_mean", "micro_batch"),
    "trl.bnpo": ("token_mean", "micro_batch"),
    "trl.dr_grpo": ("constant_normalizer", "micro_batch"),
    "trl.dapo": ("token_mean", "step"),
    "trl.cispo": ("token_mean", "step"),
    "trl.vespo": ("token_mean", "step"),
    "trl.luspo": ("seq_mean_token_sum", "micro_batch"),
    "token-mean": ("token_mean", "auto"),
    "token-sum": ("token_sum", "auto"),
    "seq-mean-token-mean": ("seq_mean_token_mean", "auto"),
    "seq-mean-token-sum": ("seq_mean_token_sum", "auto"),
    "seq-mean-token-sum-norm": ("seq_mean_token_sum_norm", "auto"),
}
#: Trainer names -> (aggregation, scope). TRL 1.16 ``loss_type`` and verl 0.9.1 ``loss_agg_mode``
#: (``stats/aggregations.py``'s ``ALIASES``).
AGGREGATION_ALIASES: Mapping[str, tuple[str, str]] = {
    **_ALIASES, **{f"verl.{k}": v for k, v in _ALIASES.items() if not k.startswith("trl.")}}


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


# --- the figure it declares ---------------------------------------------------------------------------------------

_NAMES = {alias: name for alias, (name, _) in AGGREGATION_ALIASES.items()}
_SLOPES = (Slope("declared {given}{alias}: weight ~ length^{power:g}", LENGTH_POWERS, setting="loss_aggregation",
                 aliases=_NAMES, color="red"),
           Slope("fitted {name}: weight ~ length^{power:g}", LENGTH_POWERS, key="grpo/weights/aggregation_id",
                 color="orange", style="--", differs=True))
FIGURE = FigureSpec(
    "weights", "Loss weights: length and questions",
    panels=(
        Panel("scatter", ("grpo/weights/response_length", "grpo/weights/response_weight"),
              "Weight against response length", "|weight| / |advantage| (mean 1)",
              labels=("responses (all steps)",), xlabel="response length (valid tokens)", slopes=_SLOPES),
        Panel("histogram", ("grpo/weights/question_share",), "Per-question weight", "questions (all steps)",
              labels=("equal shares: {even:.3g}",), colors=("green", "orange"), share=True,
              xlabel="a question's share of the step's |weight|"),
    ),
    caption="Left, each dot is a response, its |weight| in the loss per unit |advantage| against its length; the "
            "solid line is the declared loss_aggregation's expectation and the dashed one the fitted aggregation's, "
            "drawn under 'auto' or when its slope differs, so dots off the solid line mean the loss does not "
            "aggregate as declared (a per-response mean, seq_mean_token_mean, gives every response the same weight: "
            "slope 0, short responses' tokens weigh more; token sums, token_mean or Dr GRPO's constant normaliser, "
            "weigh a response by its length: slope 1); right, how the update spreads over questions",
    statements=(("the measured length slope", "grpo/weights/length_slope", "{:.3f}"),
                ("the largest question's share", "grpo/weights/top_question_share", "{:.1%}")),
    after="tokens", height=3.2, columns=True)

#: The family: records and its figure (its values come from the step's host rows, not a readout).
WEIGHTS = Family("weights", tuple(weight_entries()), figures=(FIGURE,))
