"""The truncation family in one place (:data:`TRUNCATION`): the rows cut at the length limit and the degenerate
split (``grpo/rows/truncated_rate``, ``grpo/groups/degenerate_{low,high,other,truncated}_rate``,
``grpo/rows/length_{above,below}_mean``) — their records, their readout from the synced rollout sums and the
report figure they declare.

Truncation and the lengths are slots of the rollout vector (``stats/rollout.py::split_fields``), read out
here. The degenerate split's three shares sort each degenerate group by the value it sits at against the
batch's reward range, which is known only once every rank's groups are merged: they come from the step's
per-group host arrays (``step/metrics.py::degenerate_split``), not from a sum.

>>> from grpo_monitor.catalog.family import read_out
>>> v = {"groups": 4.0, "truncation_rows": 8.0, "truncated_rows": 2.0, "degenerate_truncated": 1.0,
...      "len_above_rows": 0.0, "len_below_rows": 0.0}
>>> read_out([TRUNCATION], "rollout", v)
{'grpo/rows/truncated_rate': 0.25, 'grpo/groups/degenerate_truncated_rate': 0.25}
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .family import Family, FigureSpec, Panel, Readout
from .record import RATIO, Metric
from .record import metric as _m


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


# --- the readouts: plain floats of the synced rollout slots ------------------------------------------------------


def truncation_metrics(v: Mapping[str, float]) -> dict[str, float]:
    """``grpo/rows/truncated_rate`` and ``grpo/groups/degenerate_truncated_rate``, once some row declared truncation."""
    groups = v["groups"]
    return {"grpo/rows/truncated_rate": v["truncated_rows"] / v["truncation_rows"],
            "grpo/groups/degenerate_truncated_rate": v["degenerate_truncated"] / groups if groups > 0 else math.nan}


def _above(v: Mapping[str, float]) -> dict[str, float]:
    return {"grpo/rows/length_above_mean": v["len_above_sum"] / v["len_above_rows"]}


def _below(v: Mapping[str, float]) -> dict[str, float]:
    return {"grpo/rows/length_below_mean": v["len_below_sum"] / v["len_below_rows"]}


# --- the figure it declares ---------------------------------------------------------------------------------------

_SPLIT = tuple(f"grpo/groups/degenerate_{kind}_rate" for kind in ("low", "high", "other"))
FIGURE = FigureSpec(
    "split", "Truncation and the degenerate split",
    panels=(
        Panel("fractions", _SPLIT, "Degenerate groups by kind (stacked, share of all groups) and truncated rows",
              "share", labels=("all unsolved (every row at the lowest reward) (degenerate_low_rate)",
                               "all solved (every row at the highest reward) (degenerate_high_rate)",
                               "other degenerate (equal, between) (degenerate_other_rate)",
                               "truncated rows (grpo/rows/truncated_rate)"),
              colors=("red", "green", "mid grey", "orange"), share=True, overlay=("grpo/rows/truncated_rate",)),
    ),
    caption="Degenerate groups by kind, stacked as shares of all groups (they add up to the degenerate rate): all "
            "unsolved, all solved, or equal at another reward; the line is the share of rows cut at the length limit",
    statements=(("the share of all-unsolved groups", "grpo/groups/degenerate_low_rate", "{:.1%}"),
                ("the share of all-solved groups", "grpo/groups/degenerate_high_rate", "{:.1%}"),
                ("the share of other degenerate groups", "grpo/groups/degenerate_other_rate", "{:.1%}"),
                ("the truncated-row rate", "grpo/rows/truncated_rate", "{:.1%}")),
    missing=(("grpo/rows/truncated_rate", "truncation rate"),),
    after="mismatch", height=3.4)

#: The family: records, the rollout's readouts (truncation, the lengths above and below the group's mean), its
#: figure and its scan row.
TRUNCATION = Family(
    "truncation", tuple(rollout_entries()),
    readouts=(Readout("rollout", "truncation_rows", truncation_metrics), Readout("rollout", "len_above_rows", _above),
              Readout("rollout", "len_below_rows", _below)),
    figures=(FIGURE,), trends=(("truncated rows", "grpo/rows/truncated_rate", "{:.1%}"),))
