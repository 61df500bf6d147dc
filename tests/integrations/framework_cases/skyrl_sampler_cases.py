"""SkyRL's real trainer step ``RayPPOTrainer.compute_advantages_and_returns`` on a real ``TrainingInputBatch``.

``skyrl_train.trainer`` imports the whole distributed stack (tqdm, datasets, the workers),
which does not install on this CPU venv; its two methods this case needs, ``pad_batch`` and
``compute_advantages_and_returns``, are compiled from that module's own source file (the
real code, verbatim) and bound to a trainer stand-in holding ``cfg``. The batch carries the
sampler's side as SkyRL's generator fills it: ``rollout_logprobs`` (the inference engine's),
``action_log_probs`` (the policy's forward), ``loss_mask``.

Run in the SkyRL venv: ``python skyrl_sampler_cases.py [CASE ...]``; prints ``GRPO_CASES {json}``.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from _cases import config_kwargs, outcome_batch, run
from _sampler import defective, listed, sampled_logprobs, sampler_metrics
from grpo_monitor import MonitorConfig
from grpo_monitor.integrations import skyrl as gsk

gsk.allow_python311()
import skyrl_train.utils.ppo_utils as ppo_utils  # noqa: E402
from loguru import logger  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from skyrl_train.training_batch import TrainingInputBatch  # noqa: E402

G, GROUPS, T, DP = 4, 6, 10, 5  # 24 rows, padded by pad_batch to 25 for a data-parallel size of 5


def trainer_methods() -> dict:
    """``RayPPOTrainer.pad_batch`` and ``.compute_advantages_and_returns``, compiled from SkyRL's own source."""
    path = importlib.util.find_spec("skyrl_train").submodule_search_locations[0] + "/trainer.py"
    tree = ast.parse(Path(path).read_text(), path)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RayPPOTrainer")
    wanted = [n for n in cls.body if isinstance(n, ast.FunctionDef)
              and n.name in ("pad_batch", "compute_advantages_and_returns")]
    for fn in wanted:
        fn.decorator_list = []
    namespace = {"torch": torch, "np": np, "ppo_utils": ppo_utils, "logger": logger, "copy": copy, "math": math,
                 "TrainingInputBatch": TrainingInputBatch, "__name__": "skyrl_train.trainer"}
    namespace.update({name: object for name in ("List", "Optional", "Dict", "Any", "Tuple", "Union")})
    exec(compile(ast.Module(body=wanted, type_ignores=[]), path, "exec"), namespace)
    return {fn.name: namespace[fn.name] for fn in wanted}


METHODS = trainer_methods()


class Trainer:
    """What the two methods read from ``self``: the config, the metrics dict, the models' DP sizes."""

    pad_batch = METHODS["pad_batch"]
    compute_advantages_and_returns = METHODS["compute_advantages_and_returns"]

    def __init__(self, max_generate_length: int = T, max_turns: int = 1):
        self.cfg = OmegaConf.create({
            "generator": {"step_wise_trajectories": False, "max_turns": max_turns,
                          "sampling_params": {"max_generate_length": max_generate_length, "logprobs": 0}},
            "trainer": {"algorithm": {"advantage_estimator": "grpo", "gamma": 1.0, "lambd": 1.0,
                                      "grpo_norm_by_std": True}, "logger": "console"}})
        self.all_metrics: dict = {}
        model = SimpleNamespace(actor_infos=[SimpleNamespace(rank=SimpleNamespace(dp_size=DP))])
        self.policy_model, self.critic_model, self.ref_model = model, None, None


def training_input(defect: str = "none", seed: int = 0) -> TrainingInputBatch:
    """A padded training batch as convert_to_training_input leaves it, plus the policy's log-probs."""
    scores, lengths, mask, perm = outcome_batch(GROUPS, G, T, seed)
    _, sampler_lp = sampled_logprobs(len(scores), T, seed)
    sampler_lp = defective(sampler_lp, defect, seed)
    rewards = torch.zeros(len(scores), T)
    rewards[torch.arange(len(scores)), lengths - 1] = scores
    loss_mask = mask.long()
    loss_mask[perm[:2], 0] = 0  # tokens the policy loss skips (e.g. an environment observation)
    uids = [f"uid-{i // G}" for i in range(len(scores))]
    data = TrainingInputBatch({
        "sequences": torch.zeros(len(scores), T, dtype=torch.long)[perm],
        "response_mask": mask.long()[perm], "loss_mask": loss_mask[perm], "rewards": rewards[perm],
        "rollout_logprobs": (sampler_lp * mask)[perm], "is_last_step": None})
    data.metadata = {"uids": [uids[i] for i in perm.tolist()], "response_length": T,
                     "avg_response_length": float(lengths.float().mean())}
    return data


def fed(data: TrainingInputBatch) -> dict:
    real = [not u.startswith("pad") for u in data.metadata["uids"]]
    keep = torch.tensor(real)
    return {"mask": listed(data["loss_mask"][keep].double()), "sampler": listed(data["rollout_logprobs"][keep]),
            "trainer": listed(data["action_log_probs"][keep]), "rewards": listed(data["rewards"][keep].sum(-1)),
            "group": [u for u, r in zip(data.metadata["uids"], real, strict=True) if r],
            "truncated": listed(data["response_mask"][keep].sum(-1) >= T)}


def sampler_side(defect: str = "none", max_turns: int = 1) -> dict:
    trainer = Trainer(max_turns=max_turns)
    data = trainer.pad_batch(training_input(defect))
    data["action_log_probs"] = _policy_logprobs(data)
    data["base_action_log_probs"], data["values"] = None, None  # no reference model, no critic
    att = gsk.attach(config=MonitorConfig(**config_kwargs()))
    try:
        data = trainer.compute_advantages_and_returns(data)
        report = att.reports[-1]
        return {"metrics": sampler_metrics(att), "fed": fed(data), "pad_size": data.metadata["pad_size"],
                "violations": [[v.invariant, v.severity] for v in report.violations]}
    finally:
        gsk.detach()


def _policy_logprobs(data: TrainingInputBatch) -> torch.Tensor:
    """What fwd_logprobs_values_reward stores: the trainer's log-probs of the batch's rows (the pads' too)."""
    trainer_lp, _ = sampled_logprobs(GROUPS * G, T, 0)
    _, _, mask, perm = outcome_batch(GROUPS, G, T, 0)
    rows = (trainer_lp * mask)[perm]
    pad = len(data["response_mask"]) - len(rows)
    return torch.cat([rows, rows[:pad]])


def dispatcher_alone() -> dict:
    """The dispatcher called with tensors of no training batch (a plain loop): no sampler side, no fault."""
    att = gsk.attach(config=MonitorConfig(**config_kwargs()))
    try:
        data = training_input()
        ppo_utils.compute_advantages_and_returns(
            token_level_rewards=data["rewards"], response_mask=data["response_mask"].clone(),
            index=data.metadata["uids"],
            adv_estimator="grpo", config=OmegaConf.create({"advantage_estimator": "grpo"}), values=None,
            grpo_norm_by_std=True, gamma=1.0, lambd=1.0)
        return {"metrics": sampler_metrics(att), "violations": [v.invariant for v in att.reports[-1].violations]}
    finally:
        gsk.detach()


CASES = {
    "healthy": sampler_side,
    "shifted_by_one": lambda: sampler_side("shift"),
    "multi_turn": lambda: sampler_side(max_turns=3),
    "dispatcher_alone": dispatcher_alone,
}

if __name__ == "__main__":
    run(CASES, sys.argv[1:])
