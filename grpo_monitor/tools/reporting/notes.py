"""What to set to get a metric family the run did not log, per integration: one table, keyed by family and integration.

A figure the run has no data for gets a note: "<title>: no data in this run (<what to do>)".
What to do depends on where the run came from (``RunData.integration``, from the run
record): a user of the plain API calls ``observe_loss`` with ``ref_logprobs``; a TRL user
never calls it and sets ``beta > 0`` instead. :data:`NO_DATA` holds the advice per
(family, integration); a family is a metric key or a key prefix (``"grpo/kl/"``), matched
against the figure's principal key, the longest match winning. A new family (or a new
figure) adds its rows here and gets its notes in every integration's report for free;
without a row the note falls back to the metric catalogue (which call logs the key) for
the plain API, and to :data:`NOT_OBSERVED` for an integration.

>>> advice("grpo/kl/k1_mean", "trl", {"beta": 0.0})
'set beta > 0 in GRPOConfig (this run: beta = 0.0); TRL then computes the reference log-probs the KL estimators need'
>>> advice("grpo/kl/k1_mean", "api", {})
'logged when you call observe_loss with logprobs, ref_logprobs'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Integration name (the run record's) -> how the notes name it.
INTEGRATIONS: dict[str, str] = {
    "api": "the plain API", "trl": "TRL", "verl": "verl", "openrlhf": "OpenRLHF", "skyrl": "SkyRL",
    "areal": "AReaL", "scan": "grpo-monitor scan",
}

_DECLARE = "declare the estimator with MonitorConfig(estimator=...) when {who}'s option has no registry entry"
_NO_QUESTIONS = ("the {who} integration groups rows by {ids}, not by question, so there is no per-question history "
                 "(the iid prediction and overdispersion need question ids and 0/1 rewards)")
_NO_LEDGER = ("the {who} integration does not observe generation rounds; with dynamic sampling call "
              "monitor.observe_generation(rewards, question_ids=...) on every generated batch, filtered groups "
              "included")
_NO_RATIO = ("the {who} integration does not observe the policy loss's old log-probs; call "
             "monitor.observe_loss(mask=..., logprobs=..., old_logprobs=...) in your loss")

_NO_SAMPLER = ("the {who} integration found no rollout log-probs in this run; have the inference engine return "
               "them, or call monitor.observe_loss(mask=..., logprobs=..., sampler_logprobs=...) in your loss")
_NO_ENTROPY = ("the {who} integration does not see per-token entropies; call monitor.observe_loss(mask=..., "
               "entropy=...) where the policy loss computes them")

_NO_WEIGHTS = ("the {who} integration observes the advantage step, not the policy loss: declare the loss's "
               "aggregation with MonitorConfig(loss_aggregation=...) to derive the weights from the masks and "
               "advantages it passes, or call monitor.observe_loss(mask=..., advantages=..., logprobs=..., loss=...) "
               "where the policy loss is computed")

#: (family, integration) -> what to do, with ``{setting}`` fields filled from the run record's settings.
NO_DATA: dict[tuple[str, str], str] = {
    # TRL (GRPOTrainer through grpo_monitor.integrations.trl.attach)
    ("grpo/kl/", "trl"): "set beta > 0 in GRPOConfig (this run: beta = {beta}); TRL then computes the reference "
                         "log-probs the KL estimators need",
    ("grpo/ratio/", "trl"): "set num_iterations > 1 in GRPOConfig (this run: num_iterations = {num_iterations}), "
                            "or steps_per_generation above gradient_accumulation_steps; TRL then keeps "
                            "old_per_token_logps, from which the ratio is computed",
    ("grpo/sampling/responses_per_retained_group", "trl"): "TRL's GRPOTrainer has no dynamic sampling: every "
                                                           "generated group is trained on, so there is no ledger",
    ("grpo/groups/overdispersion", "trl"): "reward functions whose weighted sum is 0 or 1 per completion give it "
                                           "(TRL's prompts are the question ids)",
    ("grpo/weights/", "trl"): "the TRL integration measures the loss's token weights from the policy log-probs of "
                              "each loss; none reached it in this run (see docs/integrations.md for the loss types "
                              "and masks it declares)",
    ("grpo/mismatch/", "trl"): "set use_vllm=True and vllm_importance_sampling_correction=True in GRPOConfig (this "
                               "run: use_vllm = {use_vllm}, vllm_importance_sampling_correction = "
                               "{vllm_importance_sampling_correction}); TRL then keeps sampling_per_token_logps, "
                               "the sampler's log-probs the mismatch statistics compare with the trainer's",
    ("grpo/entropy/", "trl"): "the TRL integration passes TRL's own per-token entropies; none reached it in this run "
                              "(TRL computes them for the loss, see docs/integrations.md)",
    # verl (grpo_monitor.integrations.verl.attach)
    ("grpo/mismatch/", "verl"): "the rollout must return its log-probs: set "
                                "actor_rollout_ref.rollout.calculate_log_probs=True (default False), so the DataProto "
                                "carries rollout_log_probs beside old_log_probs",
    ("grpo/entropy/", "verl"): "the verl integration sees the driver's DataProto, which holds no per-token entropies; "
                               "call monitor.observe_loss(mask=..., entropy=...) where the actor computes them",
    ("grpo/weights/", "verl"): "declare the actor's loss aggregation: MonitorConfig(group_size=n, "
                               "**grpo_monitor.integrations.verl.loss_config(cfg.actor_rollout_ref.actor)); to "
                               "measure the weights, call observe_loss(..., loss=) where agg_loss runs",
    ("grpo/kl/", "verl"): "set algorithm.use_kl_in_reward=True or actor_rollout_ref.actor.use_kl_loss=True; verl "
                          "then calls kl_penalty, which the integration observes with the response mask",
    ("grpo/ratio/", "verl"): _NO_RATIO,
    ("grpo/sampling/responses_per_retained_group", "verl"): _NO_LEDGER,
    ("grpo/groups/overdispersion", "verl"): _NO_QUESTIONS.replace("{ids}", "uid"),
    ("grpo/adv/", "verl"): "the integration checks verl's group-relative estimators (grpo, rloo, ...); this run "
                           "used none of them",
    # OpenRLHF, SkyRL, AReaL (one wrapped advantage entry point each)
    ("grpo/kl/", "openrlhf"): "run with a reference model (--algo.kl.init_coef > 0 or --algo.kl.use_loss): the "
                              "experience then carries base_action_log_probs",
    ("grpo/kl/", "skyrl"): "the SkyRL integration observes the advantage dispatcher only; call "
                           "monitor.observe_loss(mask=..., logprobs=..., ref_logprobs=...) in your policy loss",
    ("grpo/kl/", "areal"): "give the actor a reference model (the batch then carries ref_logp)",
    ("grpo/ratio/", "openrlhf"): _NO_RATIO,
    ("grpo/ratio/", "skyrl"): _NO_RATIO,
    ("grpo/ratio/", "areal"): _NO_RATIO,
    ("grpo/sampling/responses_per_retained_group", "openrlhf"): _NO_LEDGER,
    ("grpo/sampling/responses_per_retained_group", "skyrl"): _NO_LEDGER,
    ("grpo/sampling/responses_per_retained_group", "areal"): _NO_LEDGER,
    ("grpo/groups/overdispersion", "openrlhf"): _NO_QUESTIONS.replace("{ids}", "experience.index"),
    ("grpo/groups/overdispersion", "skyrl"): _NO_QUESTIONS.replace("{ids}", "uid"),
    ("grpo/groups/overdispersion", "areal"): _NO_QUESTIONS.replace("{ids}", "contiguous blocks of rows"),
    ("grpo/adv/", "openrlhf"): _DECLARE,
    ("grpo/adv/", "skyrl"): _DECLARE,
    ("grpo/adv/", "areal"): _DECLARE,
    ("grpo/mismatch/", "openrlhf"): _NO_SAMPLER,
    ("grpo/mismatch/", "skyrl"): _NO_SAMPLER,
    ("grpo/mismatch/", "areal"): _NO_SAMPLER,
    ("grpo/weights/", "openrlhf"): _NO_WEIGHTS,
    ("grpo/weights/", "skyrl"): _NO_WEIGHTS,
    ("grpo/weights/", "areal"): _NO_WEIGHTS,
    ("grpo/entropy/", "openrlhf"): _NO_ENTROPY,
    ("grpo/entropy/", "skyrl"): _NO_ENTROPY,
    ("grpo/entropy/", "areal"): _NO_ENTROPY,
    # grpo-monitor scan (a finished run's recorded rollouts)
    ("grpo/kl/", "scan"): "a scan sees the recorded rewards (and advantages), not log-probs",
    ("grpo/ratio/", "scan"): "a scan sees the recorded rewards (and advantages), not log-probs",
    ("grpo/tokens/", "scan"): "a scan sees no token masks",
    ("grpo/mismatch/", "scan"): "a scan sees the recorded rewards (and advantages), not log-probs",
    ("grpo/entropy/", "scan"): "a scan sees the recorded rewards (and advantages), not entropies",
    ("grpo/weights/", "scan"): "a scan sees the recorded rewards (and advantages), not the loss or its token weights",
    ("grpo/adv/", "scan"): "record the advantages beside the rewards (a column the scan reads) to check them",
    ("grpo/sampling/responses_per_retained_group", "scan"): "a scan sees the trained groups only",
    ("grpo/groups/overdispersion", "scan"): "needs a prompt or question column and 0/1 rewards",
}

# The iid prediction needs what overdispersion needs (question ids and 0/1 rewards): the same advice.
NO_DATA.update({("grpo/groups/degenerate_rate_iid", integration): text
                for (family, integration), text in list(NO_DATA.items()) if family == "grpo/groups/overdispersion"})
# Captions that say what a drawn figure lacks (the iid prediction, the truncation line), for the plain API.
NO_DATA[("grpo/groups/degenerate_rate_iid", "api")] = ("the monitor makes one when observe_rollout gets question_ids "
                                                        "and every reward is 0 or 1")
NO_DATA[("grpo/rows/truncated_rate", "api")] = ("observe_rollout logs it with truncated= (or lengths= and "
                                                "MonitorConfig(max_response_length=...))")
NO_DATA[("grpo/rows/truncated_rate", "scan")] = ("a scan reads it from the trainer's own logged metrics (TRL "
                                                 "completions/clipped_ratio, verl response_length/clip_ratio): pass "
                                                 "--metrics with the run's W&B run, TensorBoard events or verl's "
                                                 "file log")

#: An integration's fallback for a family without a row: it should have logged it, and did not.
NOT_OBSERVED = ("the {who} integration logs it at every step it observes; none was observed in this run "
                "(attach before training starts)")


#: Integration -> why some of its steps logged no rollout (their metrics are blank in the rollout figures).
ROLLOUT_GAPS: dict[str, str] = {
    "trl": "TRL trains on each generation for several optimizer steps when num_iterations > 1 or "
           "steps_per_generation is above gradient_accumulation_steps (this run: num_iterations = {num_iterations}, "
           "steps_per_generation = {steps_per_generation}, gradient_accumulation_steps = "
           "{gradient_accumulation_steps})",
    "api": "the other steps ended (end_step) without an observe_rollout call",
}


def rollout_gaps(integration: str, settings: Mapping[str, Any]) -> str:
    """Why a run from ``integration`` has steps without a rollout (a generation reused, or no call).

    >>> rollout_gaps("trl", {"num_iterations": 2})
    'TRL trains on each generation for several optimizer steps when num_iterations > 1 or steps_per_generation is \
above gradient_accumulation_steps (this run: num_iterations = 2)'
    """
    text = ROLLOUT_GAPS.get(integration, "the {who} integration observed no rollout at the other steps")
    return _fill(text, INTEGRATIONS.get(integration, integration), settings)


def advice(key: str, integration: str, settings: Mapping[str, Any]) -> str:
    """What a run from ``integration`` should do to log ``key``'s family (see the module docstring)."""
    family = max((f for f, i in NO_DATA if i == integration and key.startswith(f)), key=len, default=None)
    who = INTEGRATIONS.get(integration, integration)
    if family is not None:
        return _fill(NO_DATA[(family, integration)], who, settings)
    if integration in ("api", "hf") or integration not in INTEGRATIONS:
        return f"logged when you {_catalogue_call(key)}"
    return _fill(NOT_OBSERVED, who, settings)


def _fill(text: str, who: str, settings: Mapping[str, Any]) -> str:
    """``text`` with ``{who}`` and the run's settings filled in; in a ``(this run: x = {x}, y = {y})`` aside, a
    setting the run record lacks is left out (the aside too when it lacks them all).

    >>> _fill("set x (this run: x = {x}, y = {y})", "TRL", {"y": 2})
    'set x (this run: y = 2)'
    """
    import re
    import string

    def aside(match: re.Match) -> str:
        known = [part for part in match.group(1).split(", ")
                 if all(name in settings for name in re.findall(r"\{(\w+)\}", part))]
        return f" (this run: {', '.join(known)})" if known else ""

    text = re.sub(r" \(this run: ([^()]*)\)", aside, text)
    names = {name for _, name, _, _ in string.Formatter().parse(text) if name and name != "who"}
    return text.format_map({**{n: settings.get(n) for n in names}, "who": who})


def _catalogue_call(key: str) -> str:
    """Which call (and which of its arguments) logs ``key``, from the metric catalogue."""
    from ...catalog.metrics import METRICS

    entry = METRICS.get(key)
    if entry is None:
        return f"log {key}"
    return f"call {entry.source}" + (f" with {entry.needs}" if entry.needs else "")
