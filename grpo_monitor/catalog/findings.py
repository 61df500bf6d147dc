"""FINDINGS: one record per run-health finding, the only place a finding is described.

A finding is not an invariant breach: every update is computed right, the run is not
learning (or is wasting what it generates). Each :class:`Finding` names the metric keys that
are its evidence, its likely causes and the trainer options that address it, per integration
(``remedies["api"]`` for a plain loop). The rules that open a finding live in
:mod:`grpo_monitor.health.rules`; the figures their thresholds come from are in ``docs/health.md``.

>>> FINDINGS["truncation_dominated"].key
'grpo/health/truncation_dominated'
>>> FINDINGS["degenerate_dominated"].severity
'stalled'
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from typing import Literal

Severity = Literal["info", "degraded", "stalled"]
#: Severities in increasing order; ``grpo/health/status`` is the index of the worst active one less one (info: 0).
SEVERITIES: tuple[str, ...] = ("info", "degraded", "stalled")
#: Integration names a finding's remedies may be keyed by ("api": a plain training loop).
INTEGRATIONS: tuple[str, ...] = ("trl", "verl", "openrlhf", "skyrl", "areal", "hf", "api")


@dataclasses.dataclass(frozen=True)
class Finding:
    """One finding: what it means, what shows it, why it happens and what to change.

    ``severity`` is the worst it reaches (a rule may open it one level lower when the evidence
    is weaker); ``patience`` the consecutive steps its condition must hold before it opens.
    """

    name: str
    severity: Severity
    meaning: str
    evidence: tuple[str, ...]
    causes: tuple[str, ...]
    remedies: Mapping[str, tuple[str, ...]]
    patience: int
    unit: str = "fraction"

    @property
    def key(self) -> str:
        """``grpo/health/<name>``: the finding's main figure, every step it is evaluated."""
        return f"grpo/health/{self.name}"

    def remedies_for(self, integration: str) -> tuple[str, ...]:
        """The remedies for ``integration`` (a plain loop's, ``"api"``, when it has none of its own)."""
        return self.remedies.get(integration) or self.remedies["api"]


_FILTER_API = "drop the questions `grpo-monitor questions RUN --saturated` lists from the dataset"
_FILTER = f"dataset filtering: {_FILTER_API} (`dataset.filter(lambda r: r['prompt'] not in saturated)`)"

_DEGENERATE = Finding(
    name="degenerate_dominated", severity="stalled", patience=3,
    meaning="Most groups have all-equal rewards, so their advantages are zero: the run generates responses that "
            "carry no gradient (the figure is the share of degenerate groups).",
    evidence=("grpo/groups/degenerate_rate", "grpo/groups/degenerate_high_rate", "grpo/groups/degenerate_low_rate",
              "grpo/groups/effective_prompts", "grpo/groups/total", "grpo/tokens/live_fraction"),
    causes=("the questions are too easy (saturated: every response at the top reward) or too hard (unsolved: "
            "every response at the bottom) for the policy",
            "a reward that is constant for most prompts (a verifier that always passes or always fails)",
            "too few responses per prompt to see both outcomes", "a sampling temperature too low for diversity"),
    remedies=types.MappingProxyType({
        "trl": (_FILTER, "raise `num_generations` (more responses per prompt see both outcomes)",
                "raise `temperature`", "check the reward functions: a constant reward gives no signal"),
        "verl": ("`algorithm.filter_groups.enable=True` (DAPO dynamic sampling; `algorithm.filter_groups.metric`, "
                 "`algorithm.filter_groups.max_num_gen_batches`)", "raise `actor_rollout_ref.rollout.n`",
                 "raise `actor_rollout_ref.rollout.temperature`", f"filter the training parquet: {_FILTER_API}"),
        "openrlhf": ("`--algo.dynamic_filtering_enable` with `--algo.dynamic_filtering_range`",
                     "raise `--rollout.n_samples_per_prompt`", "raise `--rollout.temperature`",
                     f"filter the prompt dataset: {_FILTER_API}"),
        "skyrl": ("`trainer.algorithm.dynamic_sampling.type=filter`", "raise `generator.n_samples_per_prompt`",
                  "raise `generator.sampling_params.temperature`", f"filter the dataset: {_FILTER_API}"),
        "areal": ("a dynamic filter (`should_accept_fn` of the rollout) dropping all-equal groups",
                  "raise `gconfig.n_samples`", "raise `gconfig.temperature`", f"filter the dataset: {_FILTER_API}"),
        "api": (f"filter the dataset: {_FILTER_API}", "more responses per prompt, a higher sampling temperature",
                "resample degenerate groups before the update (dynamic sampling)"),
    }),
)

_SUPPLY = Finding(
    name="prompt_supply", severity="degraded", patience=1,
    meaning="Across their sightings, few questions still give reward variation: the dataset is running out of "
            "learnable prompts (the figure is the learnable share of the questions seen twice or more).",
    evidence=("grpo/health/supply_learnable_frac", "grpo/health/supply_saturated_frac",
              "grpo/health/supply_unsolved_frac", "grpo/groups/effective_prompts", "grpo/groups/total"),
    causes=("the policy has learned most of the dataset (saturated questions)",
            "part of the dataset is beyond the policy (unsolved questions)"),
    remedies=types.MappingProxyType({
        "trl": (_FILTER, "add harder questions to the dataset", "raise `num_generations`"),
        "verl": ("`algorithm.filter_groups.enable=True`", f"filter the training parquet: {_FILTER_API}",
                 "add harder questions to `data.train_files`"),
        "api": (f"filter the dataset: {_FILTER_API} (and `--unsolved`)", "add harder questions"),
    }),
)

_TRUNCATION = Finding(
    name="truncation_dominated", severity="stalled", patience=3,
    meaning="Most completions are cut at the length limit (the figure is the truncated share of rows); masked "
            "out of the loss, they carry no gradient, and their rewards are usually all failures.",
    evidence=("grpo/rows/truncated_rate", "grpo/groups/degenerate_truncated_rate", "grpo/tokens/valid",
              "grpo/tokens/rows", "grpo/tokens/response_length_mean"),
    causes=("a length limit below what the task needs", "a policy that rambles or loops (no EOS)",
            "masking truncated completions out of the loss when almost all are truncated"),
    remedies=types.MappingProxyType({
        "trl": ("raise `max_completion_length`", "`mask_truncated_completions=False` while most rows are cut",
                "a length penalty or a format reward that rewards stopping"),
        "verl": ("raise `data.max_response_length`",
                 "DAPO's overlong reward shaping (an overlong buffer in the reward)",
                 "a format reward that rewards stopping"),
        "openrlhf": ("raise `--rollout.max_new_tokens`",
                     "`--reward.overlong_buffer_len` / `--reward.overlong_penalty_factor`"),
        "skyrl": ("raise `generator.sampling_params.max_generate_length`",),
        "areal": ("raise `gconfig.max_new_tokens`", "`actor.overlong_reward_penalty`"),
        "api": ("raise the generation length limit", "do not mask truncated rows while most are truncated",
                "reward stopping"),
    }),
)

_ZERO_GRADIENT = Finding(
    name="zero_gradient_steps", severity="stalled", patience=1,
    meaning="Steps whose update carries no signal: no valid loss token, every advantage zero, or measured token "
            "weights all zero (the figure is the share of such steps so far).",
    evidence=("grpo/tokens/valid", "grpo/tokens/live_fraction", "grpo/groups/effective_prompts",
              "grpo/weights/effective_responses"),
    causes=("every completion masked (truncated under a truncation mask, or an empty mask)",
            "every group degenerate", "a loss that does not depend on the advantages"),
    remedies=types.MappingProxyType({
        "trl": ("raise `max_completion_length` or set `mask_truncated_completions=False`",
                "raise `num_generations` / `temperature`", _FILTER),
        "verl": ("raise `data.max_response_length`", "`algorithm.filter_groups.enable=True`"),
        "api": ("check the loss mask and the advantages reaching the loss", "fix what the other findings name"),
    }),
)

_COLLAPSE = Finding(
    name="entropy_collapse", severity="degraded", patience=3,
    meaning="The policy's per-token entropy falls steadily (robust trend): exploration is ending (the figure is "
            "the estimated steps until it reaches MonitorConfig.entropy_floor).",
    evidence=("grpo/entropy/mean", "grpo/entropy/low_frac", "grpo/reward/mean"), unit="steps",
    causes=("a learning rate too high", "no entropy regularisation with a strong advantage signal",
            "a sampling temperature below 1 in training"),
    remedies=types.MappingProxyType({
        "trl": ("lower `learning_rate`", "`use_adaptive_entropy=True` with `entropy_target`, or `entropy_coef`",
                "raise `epsilon_high` (clip-higher)", "`top_entropy_quantile` < 1"),
        "verl": ("lower `actor_rollout_ref.actor.optim.lr`", "`actor_rollout_ref.actor.entropy_coeff` > 0",
                 "raise `actor_rollout_ref.actor.clip_ratio_high` (clip-higher)"),
        "openrlhf": ("lower the actor learning rate", "`--actor.entropy_coef` > 0", "`--actor.eps_clip_low_high`"),
        "skyrl": ("`trainer.algorithm.use_entropy_loss=True` with `entropy_loss_coef`", "lower the policy lr"),
        "areal": ("lower `actor.optimizer.lr`", "raise `gconfig.temperature`"),
        "api": ("lower the learning rate", "add an entropy bonus", "clip-higher (a larger upper clip)"),
    }),
)

_EXPLOSION = Finding(
    name="entropy_explosion", severity="degraded", patience=3,
    meaning="The per-token entropy rises steadily and well above where it started: the policy is drifting toward "
            "noise (the figure is the entropy over its first steps' level).",
    evidence=("grpo/entropy/mean", "grpo/reward/mean", "grpo/kl/k3_mean"), unit="ratio",
    causes=("a learning rate too high", "an entropy bonus too strong", "a sampler/trainer mismatch"),
    remedies=types.MappingProxyType({
        "trl": ("lower `learning_rate`", "lower `entropy_coef` / `entropy_coef_max`", "raise `beta`"),
        "verl": ("lower `actor_rollout_ref.actor.optim.lr`", "lower `actor_rollout_ref.actor.entropy_coeff`"),
        "api": ("lower the learning rate", "lower the entropy bonus", "a KL penalty toward the reference"),
    }),
)

_PLATEAU = Finding(
    name="reward_plateau", severity="info", patience=10,
    meaning="The mean reward has not improved over the window beyond the step-to-step noise measured from the "
            "per-question reward variance (the figure is the improvement in noise units).",
    evidence=("grpo/reward/mean", "grpo/reward/question_std_mean", "grpo/groups/total"), unit="standard errors",
    causes=("the learning signal is gone (see the other findings)", "a learning rate too low",
            "the task is learned as far as this policy can go"),
    remedies=types.MappingProxyType({
        "trl": ("see degenerate_dominated / truncation_dominated if open", "raise `learning_rate`", _FILTER),
        "verl": ("see the other findings", "raise `actor_rollout_ref.actor.optim.lr`"),
        "api": ("see the other findings", "raise the learning rate", "harder questions"),
    }),
)

_MISMATCH = Finding(
    name="mismatch_drift", severity="info", patience=3,
    meaning="The sampler/trainer mismatch KL (k3) climbs over the run while still under its error threshold (the "
            "figure is its recent level over its early level).",
    evidence=("grpo/mismatch/k3_mean", "grpo/mismatch/outside_frac"), unit="ratio",
    causes=("the policy moves into regions where the inference engine's numerics differ (low-probability tokens)",
            "a growing policy lag in an asynchronous trainer"),
    remedies=types.MappingProxyType({
        "trl": ("`vllm_importance_sampling_correction=True` (`vllm_importance_sampling_mode`, "
                "`vllm_importance_sampling_cap`)",),
        "verl": ("`algorithm.rollout_correction.rollout_is` (truncated importance sampling, "
                 "`rollout_is_threshold`)",),
        "openrlhf": ("`--algo.advantage.is_correction_mode` / `--algo.advantage.is_correction_threshold`",),
        "api": ("truncated importance sampling with the sampler's log-probs", "match the engines' dtypes"),
    }),
)

_LENGTH = Finding(
    name="length_bias", severity="info", patience=3,
    meaning="The lengths of responses above and below their group's mean reward diverge over the run: reward is "
            "being gained or lost through length (the figure is the log ratio of the two lengths' trend).",
    evidence=("grpo/rows/length_above_mean", "grpo/rows/length_below_mean", "grpo/weights/length_slope",
              "grpo/weights/long_quarter_share"), unit="log ratio",
    causes=("a reward that correlates with length (reward hacking by length)",
            "a token-sum loss (length_slope 1) that weighs long responses more"),
    remedies=types.MappingProxyType({
        "trl": ("`loss_type='dr_grpo'` or `'dapo'` (length-neutral aggregation)", "a length penalty in the reward",
                "lower `max_completion_length`"),
        "verl": ("`actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean`", "an overlong penalty"),
        "api": ("a length-neutral loss aggregation", "a length penalty in the reward"),
    }),
)

_ROUTING = Finding(
    name="routing_disagreement", severity="degraded", patience=3,
    meaning="The trainer and the inference engine route the same tokens to different MoE experts more often than "
            "numerical noise does (the figure is grpo/moe/agreement: the share of (token, layer) pairs with the "
            "same expert set); the policy trained is not the one that sampled, the instability of MoE GRPO runs.",
    evidence=("grpo/moe/agreement", "grpo/moe/topk_overlap", "grpo/moe/agreement_layer_min",
              "grpo/moe/replay_fallback_frac", "grpo/mismatch/k3_mean"),
    causes=("the engine's weights are stale (not synced after the optimizer step) or another checkpoint's",
            "a layer whose router the engine computes differently (dtype, fused kernel, expert bias)",
            "a long policy lag in an asynchronous trainer"),
    remedies=types.MappingProxyType({
        "verl": ("router replay: `router_replay.mode=R3` in the actor's Megatron engine config",
                 "check the rollout weight sync"),
        "areal": ("router replay (R3) where the engine returns routed experts", "lower `max_head_offpolicyness`"),
        "api": ("router replay (R3): replay the engine's experts in the trainer's forward",
                "check that the engine's weights are synced after every optimizer step",
                "compute the router in float32 on both sides"),
    }),
)

_STALENESS = Finding(
    name="staleness_bias", severity="degraded", patience=2,
    meaning="The rows dropped for staleness differ from the kept ones in reward, pass rate or length beyond noise, "
            "step after step: the drop trains on a biased sample, typically the fast, easy problems (the figure is "
            "the largest |z| of dropped minus kept, pooled over the recent steps with drops).",
    evidence=("grpo/offpolicy/drop_reward_z", "grpo/offpolicy/drop_pass_z", "grpo/offpolicy/drop_length_z",
              "grpo/offpolicy/dropped_frac", "grpo/offpolicy/dropped_reward_mean", "grpo/offpolicy/kept_reward_mean"),
    unit="standard errors",
    causes=("slow generations (long, hard problems) exceed the staleness bound and are dropped",
            "a staleness bound tighter than the generation time of the hard problems"),
    remedies=types.MappingProxyType({
        "verl": ("raise the staleness bound of the fully-async trainer (async_training.staleness_threshold of "
                 "its experimental config)",
                 "partial rollouts, so long generations resume on new weights instead of being dropped"),
        "areal": ("raise `max_head_offpolicyness`", "keep stale rows with a decoupled (proximal) loss instead of "
                                                    "dropping them"),
        "api": ("keep stale rows and correct them with importance weights instead of dropping them",
                "raise the staleness bound", "abort and resume long generations on the new weights"),
    }),
)

#: Every finding, by name, in display order.
FINDINGS: Mapping[str, Finding] = types.MappingProxyType({f.name: f for f in (
    _DEGENERATE, _SUPPLY, _TRUNCATION, _ZERO_GRADIENT, _COLLAPSE, _EXPLOSION, _PLATEAU, _MISMATCH, _LENGTH, _ROUTING,
    _STALENESS)})
