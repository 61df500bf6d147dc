"""The one-line Ray attach, for real: a local CPU Ray cluster whose workers attach through
``worker_process_setup_hook``, configured by ``GRPO_MONITOR_CONFIG``, and a trainer actor that
calls the framework's real advantage entry point once per step with no ``end_step()`` anywhere.

Run with the framework's python: ``python ray_cases.py {verl,skyrl,openrlhf} LOGDIR``; prints
``GRPO_CASES {json}``. Ray starts once. Cases: ``healthy`` (the actor's monitor logs every step
to the JSONL path of the job's env), ``broken`` (an estimator the user registers, declared
``verl.grpo``/... in the actor's env: ``ray.get`` fails naming the invariant) and, for verl,
``driver`` (an attach in the driver, which never calls the entry point, says so once).
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import ray

FRAMEWORK, LOGDIR = sys.argv[1], Path(sys.argv[2])
HERE = Path(__file__).resolve().parent
#: The hook each framework's runtime env names. OpenRLHF's experience maker imports flash_attn and vllm,
#: which a CPU machine lacks: ray_hooks.openrlhf_on_cpu stubs them, then calls the documented hook.
HOOKS = {"verl": "grpo_monitor.integrations.verl.attach_from_env",
         "skyrl": "grpo_monitor.integrations.skyrl.attach_from_env",
         "openrlhf": "ray_hooks.openrlhf_on_cpu"}
#: What the broken case's env declares. verl and SkyRL: the estimator of the run (a user's registered estimator
#: that forgets to centre computes the step); OpenRLHF computes group_norm inline (no registry to plug a broken
#: one into), so its env declares another estimator than the one computed, which the check must refuse.
DECLARED = {"verl": "verl.grpo", "skyrl": "skyrl.grpo", "openrlhf": "openrlhf.rloo"}
STEPS, G = 3, 4


def env_config(name: str, **fields: Any) -> str:
    return json.dumps({**fields, "sinks": [f"jsonl:{LOGDIR / name}.jsonl"], "repro_dir": str(LOGDIR / "repro")})


# ------------------------------------------------------------- the batches each framework's trainer builds
def outcome(step: int) -> tuple[Any, Any, Any, Any]:
    """Prompt-order token rewards on each row's last token, response mask, scores, and a row shuffle."""
    import torch

    gen = torch.Generator().manual_seed(step)
    n, t = 4 * G, 5
    scores = (torch.rand(n, generator=gen) < 0.5).float()
    scores[:G] = 1.0  # one constant group
    lengths = torch.randint(1, t + 1, (n,), generator=gen)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(n, t)
    rewards[torch.arange(n), lengths - 1] = scores
    return rewards, mask, scores, torch.randperm(n, generator=gen)


def shuffled(step: int) -> tuple[Any, Any, Any]:
    """verl's and SkyRL's view: rows shuffled, each carrying its prompt's uid string."""
    import numpy as np

    rewards, mask, _, perm = outcome(step)
    uid = np.array([f"{step}-{i // G}" for i in perm.tolist()], dtype=object)
    return rewards[perm], mask[perm], uid


def verl_step(step: int, broken: bool) -> None:
    from verl import DataProto
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo import core_algos, ray_trainer

    if broken and "user_shifted" not in core_algos.ADV_ESTIMATOR_REGISTRY:
        def user_shifted(token_level_rewards, response_mask, index, config=None, **kwargs):
            adv, ret = core_algos.compute_grpo_outcome_advantage(token_level_rewards, response_mask, index)
            return adv + 0.1 * response_mask, ret  # forgot to centre

        core_algos.register_adv_est("user_shifted")(user_shifted)  # registered after attach (the hook ran first)
    rewards, mask, uid = shuffled(step)
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors={"uid": uid})
    ray_trainer.compute_advantage(data, adv_estimator="user_shifted" if broken else "grpo", config=AlgoConfig())


def skyrl_step(step: int, broken: bool) -> None:
    from omegaconf import OmegaConf
    from skyrl_train.utils import ppo_utils

    name = "user_shifted" if broken else "grpo"
    if broken:
        def user_shifted(token_level_rewards, response_mask, index, **kwargs):
            adv, ret = ppo_utils.compute_grpo_outcome_advantage(token_level_rewards, response_mask, index)
            return adv + 0.1 * response_mask, ret  # forgot to centre

        try:
            ppo_utils.AdvantageEstimatorRegistry.get(name)
        except Exception:  # noqa: BLE001 - not registered yet
            ppo_utils.AdvantageEstimatorRegistry.register(name, user_shifted)
    rewards, mask, uid = shuffled(step)
    ppo_utils.compute_advantages_and_returns(
        token_level_rewards=rewards, response_mask=mask, index=uid, adv_estimator=name,
        config=OmegaConf.create({"advantage_estimator": name}), values=None, grpo_norm_by_std=True,
        gamma=1.0, lambd=1.0)


def openrlhf_step(step: int, broken: bool) -> None:
    """OpenRLHF's PPOTrainer step: shuffled Experience micro-batches through the real experience maker."""
    import argparse
    from types import SimpleNamespace

    import torch
    from openrlhf.trainer.ppo_utils import experience_maker as em
    from openrlhf.trainer.ppo_utils.experience import Experience
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController
    from openrlhf.utils.config import hierarchize

    flat = {"algo.advantage.estimator": "group_norm", "algo.advantage.no_std_norm": False,
            "algo.advantage.gamma": 1.0, "algo.advantage.lambd": 1.0, "algo.kl.use_loss": True,
            "rollout.n_samples_per_prompt": G, "reward.clip_range": (-10.0, 10.0),
            "reward.overlong_buffer_len": None, "reward.stop_properly_penalty_coef": None}
    maker = em.RemoteExperienceMaker(None, None, None, None, FixedKLController(0.0),
                                     SimpleNamespace(args=hierarchize(argparse.Namespace(**flat))), None)
    _, mask, scores, perm = outcome(step)
    exps = [Experience(action_mask=mask[rows].bool(), rewards=scores[rows].clone(), index=rows.tolist(),
                       response_length=mask[rows].sum(-1), action_log_probs=-torch.ones_like(mask[rows]),
                       base_action_log_probs=-torch.ones_like(mask[rows]), kl=torch.zeros_like(mask[rows]),
                       values=torch.zeros_like(mask[rows]), info={}) for rows in perm.split(5)]
    maker.compute_advantages_and_returns(exps)


STEP_FN = {"verl": verl_step, "skyrl": skyrl_step, "openrlhf": openrlhf_step}


@ray.remote(num_cpus=0)
class TrainerActor:
    """The framework's trainer process (verl's TaskRunner, OpenRLHF's PPOTrainer, SkyRL's entrypoint task)."""

    def fit(self, steps: int, broken: bool) -> dict:
        warnings.simplefilter("ignore")
        for step in range(steps):
            STEP_FN[FRAMEWORK](step, broken)
        import importlib

        module = importlib.import_module(f"grpo_monitor.integrations.{FRAMEWORK}")
        return {"pid": os.getpid(), "attached": module.attached() is not None}


def run_actor(env: str | None, broken: bool) -> dict:
    options = {"runtime_env": {"env_vars": {"GRPO_MONITOR_CONFIG": env}}} if env else {}
    actor = TrainerActor.options(**options).remote()
    try:
        return {"result": ray.get(actor.fit.remote(STEPS, broken), timeout=240)}
    except ray.exceptions.RayError as exc:
        return {"raised": type(exc).__name__, "message": str(exc)[-3000:]}
    finally:
        ray.kill(actor)


def records(name: str) -> list[dict]:
    path = LOGDIR / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def start_ray(runtime_env: dict, tries: int = 3) -> None:
    """``ray.init`` on a local CPU cluster; retried, since Ray gives its raylet a fixed 30 s to start,
    which a loaded machine can exceed."""
    for attempt in range(tries):
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
            return
        except Exception:  # noqa: BLE001 - "The current node timed out during startup"
            ray.shutdown()
            if attempt == tries - 1:
                raise


def main() -> None:
    LOGDIR.mkdir(parents=True, exist_ok=True)
    env_vars = {"GRPO_MONITOR_CONFIG": env_config("healthy", group_size=G),
                "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
                "PYTHONWARNINGS": "ignore"}
    driver_text = None
    if FRAMEWORK == "verl":  # the user's mistake: attaching in the driver only
        from grpo_monitor.integrations import verl as gverl

        gverl.attach(sinks=None)
    start_ray({"worker_process_setup_hook": HOOKS[FRAMEWORK], "env_vars": env_vars})
    out: dict[str, Any] = {"healthy": run_actor(None, False)}
    out["healthy"]["records"] = records("healthy")
    broken_env = env_config("broken", group_size=G, std_convention=DECLARED[FRAMEWORK])
    out["broken"] = run_actor(broken_env, True)
    out["broken"]["records"] = records("broken")
    if FRAMEWORK == "verl":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gverl.detach()
        driver_text = [str(w.message) for w in caught]
        out["driver"] = {"warnings": driver_text}
    ray.shutdown()
    print("GRPO_CASES " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
