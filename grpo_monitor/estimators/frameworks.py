"""The named estimators: generic conventions and each framework's, as parameterised families.

Each entry's ``source`` names the file, function and version (or commit) it reproduces;
``params`` hold that framework's defaults. Frameworks without unscorable rows are given
the monitor's NaN convention (see :mod:`.base`); everything else follows the source.
"""

from __future__ import annotations

import math
from functools import partial

from . import families as f
from . import long_tail as t
from .base import Estimator

TRL = "trl 1.16.0"
VERL = "verl 0.9.1"
NEMO = "NVIDIA-NeMo/RL@7ea279ab (v0.1.0-1338)"
OPENRLHF = "OpenRLHF/OpenRLHF@3c3be623 (v0.11.0)"
AREAL = "inclusionAI/AReaL@4aef98d8 (v1.0.4-17)"
ROLL = "alibaba/ROLL@8eb27cc2 (v0.3.0-9)"
SKYRL = "NovaSky-AI/SkyRL@a9564572 (skyrl_train-v0.4.0-516)"
OPEN_INSTRUCT = "allenai/open-instruct@e6c3044a (v0.3.0-29)"
ROLL_TAIL = "alibaba/ROLL@090ac946"

FULL = frozenset({"zero_group_mean", "affine_in_rewards", "degenerate_zero", "unscorable_rows", "batch_zero_mean"})
WHITENED = frozenset({"affine_in_rewards", "unscorable_rows", "batch_zero_mean"})
LOO_STD = frozenset({"degenerate_zero", "unscorable_rows"})
PASS_AT_K = frozenset({"one_nonzero_per_group", "degenerate_zero", "unscorable_rows"})
MULTI = frozenset({"zero_group_mean", "unscorable_rows", "batch_zero_mean"})


def _std(name, ddof, eps, source, text, *, stabilizer="add", singleton="zero", scale="group") -> Estimator:
    """A group-mean estimator divided by a group (or batch) std."""
    fam = partial(f.centered, scale=scale, singleton=singleton)
    return Estimator(name, fam, {"ddof": ddof, "eps": eps, "stabilizer": stabilizer}, FULL, source, text,
                     singleton=singleton)


def _plain(name, source, text, *, singleton="zero") -> Estimator:
    """``r - mean_g``: nothing free."""
    return Estimator(name, partial(f.centered, scale="none", singleton=singleton), {}, FULL, source, text,
                     singleton=singleton, fit_param=None, eps_power=None)


def _rloo(name, source, text, *, singleton="zero") -> Estimator:
    return Estimator(name, partial(f.leave_one_out, singleton=singleton), {}, FULL, source, text,
                     singleton=singleton, fit_param=None, eps_power=None)


GENERIC = (
    _std("population", 0, 0.0,
         "finite-group baselines article, section 3 (population std, stabilizer outside the root)",
         "(r - mean_g) / (std_g + eps), population std (ddof 0)"),
    _std("bessel", 1, 0.0, "torch.std default (correction=1); worked numerical example, section 2",
         "(r - mean_g) / (std_g + eps), Bessel std (ddof 1)"),
    _plain("none", "Dr. GRPO (arXiv:2503.20783)", "r - mean_g"),
    _rloo("leave_one_out", "RLOO (arXiv:2402.14740); worked numerical example, section 2.2",
          "r_i - mean of the others = n/(n-1) (r_i - mean_g)"),
    _std("batch", 0, 0.0, "one scale for the whole batch", "(r - mean_g) / (std of all rewards + eps)",
         scale="batch"),
)

TRL_ENTRIES = (
    _std("trl.group", 1, 1e-4, f"trl/trainer/grpo_trainer.py::GRPOTrainer._generate_and_score_completions "
         f"(scale_rewards='group', the default) @ {TRL}",
         "(r - nanmean_g) / (nanstd_g + 1e-4), Bessel; eps hard-coded"),
    _std("trl.batch", 1, 1e-4, f"trl/trainer/grpo_trainer.py::GRPOTrainer._generate_and_score_completions "
         f"(scale_rewards='batch') @ {TRL}", "(r - nanmean_g) / (nanstd of the batch + 1e-4), Bessel", scale="batch"),
    _plain("trl.none", f"trl/trainer/grpo_trainer.py::GRPOTrainer._generate_and_score_completions "
           f"(scale_rewards='none') @ {TRL}", "r - nanmean_g"),
    Estimator(
        "trl.normalize_then_sum", f.normalize_then_sum, {"weights": None, "group_eps": 1e-4, "ddof": 1, "eps": 1e-4},
        MULTI, f"trl/trainer/grpo_trainer.py::GRPOTrainer._generate_and_score_completions "
        f"(multi_objective_aggregation='normalize_then_sum') @ {TRL}",
        "rewards (N, K): per column (x - nanmean_g) / (nanstd_g + 1e-4), weighted nansum, then "
        "(s - nanmean) / (nanstd + 1e-4) over the batch; promises are about the weighted row sum",
        multi_reward=True),
)

VERL_ENTRIES = (
    _std("verl.grpo", 1, 1e-6, f"verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage @ {VERL}",
         "(r - mean_g) / (torch.std_g + 1e-6); a one-row group has mean 0, std 1", singleton="raw"),
    _std("verl.grpo_vectorized", 1, 1e-6,
         f"verl/trainer/ppo/core_algos.py::compute_grpo_vectorized_outcome_advantage "
         f"(verl/utils/groupwise.py::group_mean_std with eps=0) @ {VERL}",
         "(r - mean_g) / (sqrt(max(var_g, 0)) + 1e-6), Bessel; one-row group: mean 0, std 1", singleton="raw"),
    _plain("verl.grpo_no_std", f"verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage "
           f"(norm_adv_by_std_in_grpo=False) @ {VERL}", "r - mean_g; a one-row group keeps r", singleton="raw"),
    _rloo("verl.rloo", f"verl/trainer/ppo/core_algos.py::compute_rloo_outcome_advantage @ {VERL}",
          "r n/(n-1) - mean_g n/(n-1); a one-row group keeps r", singleton="raw"),
    _rloo("verl.rloo_vectorized", f"verl/trainer/ppo/core_algos.py::compute_rloo_vectorized_outcome_advantage "
          f"@ {VERL}", "(n r - sum_g) / (n - 1); a one-row group gets 0 (unlike verl.rloo)"),
    Estimator(
        "verl.reinforce_plus_plus_baseline", partial(f.whitened, group_scale="none", singleton="raw"),
        {"ddof": 1, "eps": 1e-8, "stabilizer": "add_var", "count_eps": 1e-8}, WHITENED,
        f"verl/trainer/ppo/core_algos.py::compute_reinforce_plus_plus_baseline_outcome_advantage "
        f"(verl/utils/torch_functional.py::masked_whiten) @ {VERL}",
        "c = r - mean_g (one-row group: c = r), then token whitening (c - mu) / sqrt(var + 1e-8), "
        "var Bessel over tokens, mu = sum(w c) / (sum w + 1e-8)", singleton="raw", eps_power=2, token_weighted=True),
    Estimator(
        "verl.reinforce_plus_plus", t.whitened_rewards,
        {"ddof": 1, "eps": 1e-8, "stabilizer": "add_var", "count_eps": 1e-8}, WHITENED,
        f"verl/trainer/ppo/core_algos.py::compute_reinforce_plus_plus_outcome_advantage "
        f"(verl/utils/torch_functional.py::masked_whiten) @ {VERL}",
        "token whitening of the returns, no group baseline: (r - mu) * rsqrt(var + 1e-8), var Bessel over "
        "tokens, mu = sum(w r) / (sum w + 1e-8) (gamma 1, reward on the last token)",
        singleton="raw", eps_power=2, token_weighted=True),
    Estimator(
        "verl.gpg", partial(f.positive_rate_scaled, singleton="raw"), {"f_norm": 1.0}, FULL,
        f"verl/trainer/ppo/core_algos.py::compute_gpg_outcome_advantage @ {VERL}",
        "alpha (r - mean_g) / f_norm, alpha = rows / max(#nonzero rewards, 1) over the batch's scorable rows; "
        "epsilon is accepted and unused", singleton="raw", fit_param=None, eps_power=None),
    Estimator(
        "verl.grpo_passk", partial(f.pass_at_k, scale="group", singleton="error"), {"ddof": 1, "eps": 1e-6},
        PASS_AT_K, f"verl/trainer/ppo/core_algos.py::compute_grpo_passk_outcome_advantage "
        f"(config norm_adv_by_std_in_grpo=True) @ {VERL}",
        "best row of each group: (r_max - r_second) / (torch.std_g + 1e-6); the others 0", singleton="error"),
    Estimator(
        "verl.grpo_passk_no_std", partial(f.pass_at_k, scale="none", singleton="error"), {}, PASS_AT_K,
        f"verl/trainer/ppo/core_algos.py::compute_grpo_passk_outcome_advantage "
        f"(config norm_adv_by_std_in_grpo=False) @ {VERL}", "best row of each group: r_max - r_second; the others 0",
        singleton="error", fit_param=None, eps_power=None),
)

NEMO_ENTRIES = (
    Estimator(
        "nemo_rl.grpo", f.loo_standardized, {"ddof": 1, "eps": 1e-6}, LOO_STD,
        f"nemo_rl/algorithms/advantage_estimator.py::GRPOAdvantageEstimator.compute_advantage + "
        f"nemo_rl/algorithms/utils.py::calculate_baseline_and_std_per_prompt @ {NEMO}",
        "(r_i - mean of the others) / (std of the others + 1e-6), Bessel over the n-1 others, "
        "divided only where that std > 0"),
    _std("nemo_rl.grpo_no_loo", 1, 1e-6,
         f"nemo_rl/algorithms/advantage_estimator.py::GRPOAdvantageEstimator (use_leave_one_out_baseline=False) "
         f"@ {NEMO}", "(r - mean_g) / (std_g + 1e-6) where std_g > 0, else r - mean_g; Bessel",
         stabilizer="add_if_positive"),
)

OPENRLHF_ENTRIES = (
    _std("openrlhf.group_norm", 1, 1e-9, f"openrlhf/trainer/ppo_utils/experience_maker.py::"
         f"compute_advantages_and_returns (estimator='group_norm') @ {OPENRLHF}",
         "(r - mean_g) / (torch.std_g + 1e-9)"),
    _rloo("openrlhf.rloo", f"openrlhf/trainer/ppo_utils/experience_maker.py::compute_advantages_and_returns "
          f"(estimator='rloo') @ {OPENRLHF}", "r - (sum_g - r) / (n - 1)"),
    Estimator(
        "openrlhf.reinforce_baseline", partial(f.whitened, group_scale="none"),
        {"ddof": 0, "eps": 1e-8, "stabilizer": "clamp_var"}, WHITENED,
        f"openrlhf/trainer/ppo_utils/experience_maker.py::compute_advantages_and_returns "
        f"(estimator='reinforce_baseline', KL in the loss) @ {OPENRLHF}",
        "c = r - mean_g, then token whitening (c - mu) * rsqrt(max(var, 1e-8)), population var over tokens",
        eps_power=None, token_weighted=True),
    _plain("openrlhf.dr_grpo", f"openrlhf/trainer/ppo_utils/experience_maker.py::compute_advantages_and_returns "
           f"(estimator='dr_grpo') @ {OPENRLHF}", "r - mean_g"),
)

_AREAL_PARAMS = {"group_ddof": 1, "group_eps": 1e-5, "ddof": 1, "eps": 1e-5, "stabilizer": "add",
                 "reward_scaling": 1.0, "reward_bias": 0.0, "reward_clip": 20.0}
AREAL_ENTRIES = (
    Estimator(
        "areal.grpo", partial(f.whitened, group_scale="group"), _AREAL_PARAMS, WHITENED,
        f"areal/utils/data.py::Normalization (reward_norm group/group, adv_norm batch/batch, "
        f"examples/math/gsm8k_grpo.yaml) + areal/trainer/ppo/actor.py::_compute_advantages @ {AREAL}",
        "z = (r' - mean_g) / (std_g + 1e-5), r' = clip((r + bias) scaling, +-20); then token whitening "
        "(z - mu) / (std + 1e-5), Bessel over tokens (kl_ctl=0, discount=gae_lambda=1)", token_weighted=True),
    Estimator(
        "areal.dr_grpo", partial(f.whitened, group_scale="none"),
        {k: v for k, v in _AREAL_PARAMS.items() if not k.startswith("group_")}, WHITENED,
        f"areal/utils/data.py::Normalization (reward_norm group mean, no std; examples/math/gsm8k_drgrpo.yaml) "
        f"@ {AREAL}", "c = r' - mean_g, then token whitening (c - mu) / (std + 1e-5), Bessel over tokens",
        token_weighted=True),
)

ROLL_ENTRIES = (
    _std("roll.reward_norm", 1, 1e-6, f"roll/utils/functionals.py::reward_norm (norm_mean_type='group', "
         f"norm_std_type='batch') @ {ROLL}", "(r - mean_g) / (torch.std of the batch + 1e-6)", scale="batch"),
    _std("roll.grpo", 1, 1e-6, f"roll/utils/functionals.py::reward_norm (adv_estimator='grpo' forces group/group) "
         f"@ {ROLL}", "(r - mean_g) / (torch.std_g + 1e-6); a one-row group is NaN in ROLL (torch.std), 0 here"),
)

SKYRL_ENTRIES = (
    _std("skyrl.grpo", 1, 1e-6, f"skyrl/backends/skyrl_train/utils/ppo_utils.py::compute_grpo_outcome_advantage "
         f"@ {SKYRL}", "(r - mean_g) / (torch.std_g + 1e-6); a one-row group has mean 0, std 1", singleton="raw"),
    Estimator(
        "skyrl.maxrl", partial(f.mean_scaled, singleton="raw"), {"eps": 1e-6}, FULL,
        f"skyrl/backends/skyrl_train/utils/ppo_utils.py::compute_maxrl_advantage @ {SKYRL}",
        "(r - mean_g) / (mean_g + 1e-6): affine with k = 1/(mean_g + eps) > 0 for rewards >= 0; "
        "a one-row group keeps r", singleton="raw", reward_domain="nonnegative"),
    Estimator(
        "skyrl.reinforce_plus_plus", t.whitened_rewards,
        {"ddof": 1, "eps": 1e-8, "stabilizer": "add_var", "count_eps": 0.0}, WHITENED,
        f"skyrl/backends/skyrl_train/utils/ppo_utils.py::compute_reinforce_plus_plus_outcome_advantage "
        f"(masked_whiten) @ {SKYRL}",
        "token whitening of the returns, no group baseline: (r - mu) * rsqrt(var + 1e-8), var Bessel over "
        "tokens, mu = sum(w r) / max(sum w, 1) (gamma 1, reward on the last token)",
        singleton="raw", eps_power=2, token_weighted=True),
    _rloo("skyrl.rloo", f"skyrl/backends/skyrl_train/utils/ppo_utils.py::compute_rloo_outcome_advantage (the same "
          f"code as skyrl-train 0.3.1's skyrl_train/utils/ppo_utils.py) @ {SKYRL}",
          "(r - mean_g) n/(n-1) on every valid token, r the row's summed token rewards; a one-row group gets 0 "
          "(unlike verl.rloo)"),
)

OPEN_INSTRUCT_ENTRIES = (
    _std("open_instruct.standard", 0, 1e-8, f"open_instruct/data_loader.py::DataPreparationActor "
         f"(advantage_normalization_type='standard') @ {OPEN_INSTRUCT}",
         "(r - mean_g) / (np.std_g + 1e-8), population"),
    _plain("open_instruct.centered", f"open_instruct/data_loader.py::DataPreparationActor "
           f"(advantage_normalization_type='centered', the default) @ {OPEN_INSTRUCT}", "r - mean_g"),
)

CLIPPED = frozenset({"degenerate_zero", "unscorable_rows"})
BATCH_MEAN = frozenset({"affine_in_rewards", "batch_zero_mean", "unscorable_rows"})
LONG_TAIL = (
    Estimator(
        "verl.opo", t.length_weighted, {}, frozenset({"affine_in_rewards", "degenerate_zero", "unscorable_rows",
                                                      "batch_zero_mean"}),
        f"verl/trainer/ppo/core_algos.py::compute_opo_outcome_advantage @ {VERL}",
        "r - sum_g(len r) / sum_g(len): the baseline weighted by response length (OPO); a one-row group keeps r",
        singleton="raw", fit_param=None, eps_power=None, token_weighted=True),
    Estimator(
        "length_weighted_loo", partial(t.length_weighted, leave_one_out=True), {}, CLIPPED,
        f"the leave-one-out form of verl's OPO baseline (compute_opo_outcome_advantage @ {VERL})",
        "r_i - sum_(j != i)(len_j r_j) / sum_(j != i) len_j: a length-weighted baseline over the other rows",
        fit_param=None, eps_power=None, token_weighted=True),
    Estimator(
        "roll.grpo_clip", partial(t.clipped, scale="group"), {"ddof": 1, "eps": 1e-6, "clip": 1.0}, CLIPPED,
        f"roll/utils/functionals.py::reward_postprocess (adv_estimator='grpo', reward_clip) and "
        f"compute_advantage (advantage_clip) @ {ROLL_TAIL}",
        "clamp((r - mean_g) / (torch.std_g + 1e-6), -c, c): the z-scores clipped after normalisation, c fitted "
        "(default 1)",
        fit_param="clip", eps_power=None),
    Estimator(
        "none_clip_negative", partial(t.clipped, scale="none", low=0.0), {"clip": math.inf}, CLIPPED,
        "Dr. GRPO centring (arXiv:2503.20783) with negative advantages set to 0 by design (issue 21's report; "
        "the clamp is ROLL's, roll/utils/functionals.py::compute_advantage)",
        "max(r - mean_g, 0): only better-than-average responses are reinforced", fit_param=None, eps_power=None),
    Estimator(
        "roll.batch_mean", partial(t.batch_mean, scale="none"), {}, BATCH_MEAN,
        f"roll/utils/functionals.py::reward_norm (norm_mean_type='batch', norm_std_type=None) @ {ROLL_TAIL}",
        "r - mean of the batch", fit_param=None, eps_power=None),
    Estimator(
        "roll.batch_norm", partial(t.batch_mean, scale="batch"), {"ddof": 1, "eps": 1e-6}, BATCH_MEAN,
        f"roll/utils/functionals.py::reward_norm (norm_mean_type='batch', norm_std_type='batch') @ {ROLL_TAIL}",
        "(r - mean of the batch) / (torch.std of the batch + 1e-6)"),
    Estimator(
        "verl.gdpo", t.decoupled_whitened,
        {"weights": None, "group_ddof": 1, "group_eps": 1e-6, "ddof": 1, "eps": 1e-8, "count_eps": 1e-8},
        frozenset({"unscorable_rows", "batch_zero_mean"}),
        f"verl/trainer/ppo/core_algos.py::compute_gdpo_outcome_advantage @ {VERL}",
        "rewards (N, K): per column (x - mean_g) / (torch.std_g + 1e-6) (one-row group keeps x), weighted sum, "
        "then token whitening (s - mu) / sqrt(var + 1e-8), var Bessel over tokens",
        fit_param=None, eps_power=None, multi_reward=True, token_weighted=True),
)

ALL: tuple[Estimator, ...] = (
    GENERIC + TRL_ENTRIES + VERL_ENTRIES + NEMO_ENTRIES + OPENRLHF_ENTRIES + AREAL_ENTRIES + ROLL_ENTRIES
    + SKYRL_ENTRIES + OPEN_INSTRUCT_ENTRIES + LONG_TAIL
)
