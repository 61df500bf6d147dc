"""The run-health keys (section Health): the status, wasted generation, the question supply and one figure per
finding of :data:`~grpo_monitor.catalog.findings.FINDINGS` (the finding's meaning says what its figure is)."""

from __future__ import annotations

from .findings import FINDINGS
from .record import Metric
from .record import metric as _m

#: How the health figures are computed: after the step's sync, from its metrics and the tracker's memory.
HEALTH = "after the sync, from the step's synced metrics and the run-health memory (no device work)"


def health_entries() -> list[Metric]:
    """Every ``grpo/health/*`` key, the status first."""
    h = dict(section="Health", source="end_step")
    supply = "question supply: shares of the questions seen twice or more"
    return [
        _m("grpo/health/status", "code", HEALTH, "max", "Run health: 0 healthy, 1 degraded, 2 stalled (the worst "
           "open finding; info findings leave it at 0). health.json beside the JSONL log says which and why.",
           summary="max", **h),
        _m("grpo/health/wasted_generation_frac", "fraction", HEALTH, "mean weighted by generated tokens",
           "Share of the step's generation whose advantage is zero: valid tokens outside live rows (all of them "
           "when no token is valid), else degenerate groups; discarded groups of dynamic sampling count as wasted.",
           **h),
        _m("grpo/alerts", "markdown", "written by the TensorBoard sink at the latest report's step", "one entry per "
           "alert", "TensorBoard's text for an alert (TensorBoard has no alerts): a run-health finding's onset or "
           "clearing, a part switched off.", kind="text", only_when="the TensorBoard sink got an alert", **h),
        *(_m(f"grpo/health/supply_{c}_frac", "fraction", HEALTH, "last", f"Share of the questions seen twice or "
             f"more (all seen, before any repeats) that were {text}.", panel=supply, needs="question_ids", **h)
          for c, text in (("saturated", "saturated at every sighting (every group all at the batch's top reward)"),
                          ("unsolved", "unsolved at every sighting (every group all at the batch's bottom reward)"),
                          ("learnable", "learnable (any other sighting)"))),
        *(_m(f.key, f.unit, HEALTH, "last", f"{f.meaning} Finding '{f.name}' ({f.severity} at worst; "
             "docs/health.md).", only_when=_ONLY_WHEN.get(f.name, "its evidence is in the step's metrics"),
             **h) for f in FINDINGS.values()),
    ]


_ONLY_WHEN = {
    "prompt_supply": "question ids or the effective prompts of some steps are known",
    "reward_plateau": "20 steps of mean reward are known",
    "entropy_collapse": "entropies are observed (observe_loss(entropy=))",
    "entropy_explosion": "entropies are observed (observe_loss(entropy=))",
    "mismatch_drift": "sampler log-probs are observed (observe_loss(sampler_logprobs=))",
    "length_bias": "lengths are observed (observe_rollout(lengths=)) and both sides of the group mean have rows",
    "truncation_dominated": "truncation is known (observe_rollout(truncated=) or lengths with max_response_length)",
    "routing_disagreement": "routed experts are observed (observe_loss(routed_experts=, sampler_routed_experts=))",
    "staleness_bias": "dropped rows are observed (observe_generation(dropped=)) on two steps, 8 rows each side",
}
