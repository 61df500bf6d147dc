"""The entropy family in one place (:data:`ENTROPY`): ``grpo/entropy/*`` — its records, its readout from the
synced token sums and the report figure it declares.

The token pass (``stats/tokens/table.py``) sums the trainer's per-token entropies (``ent_*`` slots,
from ``observe_loss(entropy=)``) and the sampled tokens' negative log-probs (``nll_*``); the shares
``low_frac`` and ``sampled_nll_mean`` are single slots the field table reports, the mean and the std
are read out here.

>>> from grpo_monitor.catalog.family import read_out
>>> read_out([ENTROPY], "tokens", {"ent_tokens": 4.0, "ent_sum": 2.0, "ent_sq_sum": 2.0})
{'grpo/entropy/mean': 0.5, 'grpo/entropy/std': 0.5}
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .family import Family, FigureSpec, Panel, Readout
from .record import RATIO, Metric
from .record import metric as _m


def entropy_entries() -> list[Metric]:
    """``grpo/entropy/*``: the trainer's per-token entropies, and the sampled tokens' negative log-probs."""
    ent = dict(section="Entropy", source="observe_loss")
    tok = "mean weighted by the valid tokens carrying entropies"
    return [
        _m("grpo/entropy/mean", "nats", RATIO, tok, "Mean over valid tokens of the trainer's per-token entropy "
           "(TRL's entropy, verl's actor/entropy); a collapse towards 0 ends exploration, a climb means the policy "
           "is diffusing.", needs="entropy", panel="entropy: mean and std", **ent),
        _m("grpo/entropy/std", "nats", "from counts, sums and sums of squares summed over micro-batches and ranks",
           "mean (stds do not add exactly)", "Population std of the per-token entropies over valid tokens.",
           needs="entropy", panel="entropy: mean and std", **ent),
        _m("grpo/entropy/low_frac", "fraction", RATIO, tok, "Share of valid tokens whose entropy is below "
           "entropy_low_threshold (nats): near-deterministic tokens; rising towards 1, entropy is collapsing.",
           needs="entropy", **ent),
        _m("grpo/entropy/sampled_nll_mean", "nats", RATIO, tok, "Mean of -sampler_logprobs (else -old_logprobs) "
           "over valid tokens: a Monte Carlo estimate of the sampling distribution's entropy from the sampled "
           "tokens alone, logged whenever those log-probs are given.", needs="sampler_logprobs or old_logprobs",
           **ent),
    ]


def entropy_metrics(v: Mapping[str, float]) -> dict[str, float]:
    """``grpo/entropy/{mean,std}``: the population mean and std of the per-token entropies (variance clamped at 0)."""
    n, s, sq = v["ent_tokens"], v["ent_sum"], v["ent_sq_sum"]
    mean = s / n
    return {"grpo/entropy/mean": mean, "grpo/entropy/std": math.sqrt(max(sq / n - mean * mean, 0.0))}


FIGURE = FigureSpec(
    "entropy", "Entropy",
    panels=(
        Panel("band", ("grpo/entropy/mean", "grpo/entropy/std"), "Trainer's per-token entropy over valid tokens",
              "nats", labels=("", "+-1 std over valid tokens (grpo/entropy/std)"), min_span=0.05),
        Panel("lines", ("grpo/entropy/low_frac",), "Nearly deterministic tokens (grpo/entropy/low_frac)",
              "share of valid tokens", labels=("tokens below entropy_low_threshold = {entropy_low_threshold:g} nats",),
              colors=("orange",), share=True),
    ),
    caption="The trainer's per-token entropy over valid tokens (band: +-1 std); a collapse towards 0 or a steady "
            "rise is the policy becoming deterministic or diffusing",
    statements=(("the mean entropy per token", "grpo/entropy/mean", "{:.3f}"),
                ("the entropy std", "grpo/entropy/std", "{:.3f}"),
                ("the share of low-entropy tokens", "grpo/entropy/low_frac", "{:.1%}")),
    after="split")

#: The family: records, the token pass's readout, its figure and its scan row.
ENTROPY = Family("entropy", tuple(entropy_entries()), readouts=(Readout("tokens", "ent_tokens", entropy_metrics),),
                 figures=(FIGURE,), trends=(("entropy (nats/token)", "grpo/entropy/mean", "{:.3g}"),))
