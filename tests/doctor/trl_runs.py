"""Real TRL GRPOTrainer runs (the tiny char-level Llama, CPU) recorded as users record them: an offline W&B run
(with the completions tables), TensorBoard events, and the live monitor's JSONL log.

Configurations: ``saturated`` (a reward constant at its top for 9 prompts of 10), ``truncated``
(completions cut at 1 token under ``mask_truncated_completions=True``) and three healthy ones (a reward that varies
within groups, room to stop; ``scale_rewards`` group / batch / none with ``loss_type`` grpo / dapo / dr_grpo).
Also runnable as a script to keep recordings for calibration: ``python tests/doctor/trl_runs.py OUT [NAME...]``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integrations"))

from tiny_trl import build_tiny_model, char_fraction_reward, make_trainer  # noqa: E402

#: Ten prompts; every one but the last is "solved" by the saturated run's reward.
PROMPTS = ("spell a", "say bb", "cab?", "a b c", "abc", "bca", "say a", "spell b", "c a b", "vary")


def saturated_reward(prompts: Sequence[str], completions: Sequence[str], **_: Any) -> list[float]:
    """1.0 (the top reward) for every completion of the nine solved prompts; the fraction of 'a' for "vary"."""
    return [c.count("a") / max(len(c), 1) if p == "vary" else 1.0 for p, c in zip(prompts, completions, strict=True)]


def variety_reward(prompts: Sequence[str], completions: Sequence[str], **_: Any) -> list[float]:
    """Distinct characters over length: varies between the completions of a group (a learnable signal)."""
    return [len(set(c)) / (len(c) + 1) for c in completions]


#: name -> GRPOConfig overrides and reward functions.
RUNS: dict[str, dict[str, Any]] = {
    "saturated": {"reward_funcs": [saturated_reward], "max_completion_length": 8},
    "truncated": {"reward_funcs": [char_fraction_reward()], "max_completion_length": 1,
                  "mask_truncated_completions": True},
    "healthy": {"reward_funcs": [variety_reward], "max_completion_length": 48, "scale_rewards": "group",
                "loss_type": "grpo"},
    "healthy-batch-dapo": {"reward_funcs": [variety_reward], "max_completion_length": 48, "scale_rewards": "batch",
                           "loss_type": "dapo"},
    "healthy-none-dr_grpo": {"reward_funcs": [variety_reward], "max_completion_length": 48, "scale_rewards": "none",
                             "loss_type": "dr_grpo"},
}
#: The healthy configurations (TRL's scale_rewards x loss_type, as the issue's three).
HEALTHY = ("healthy", "healthy-batch-dapo", "healthy-none-dr_grpo")


def record_run(name: str, model_path: str, root: Path, steps: int = 10, live: bool = True, **extra: Any) -> Path:
    """Train run ``name`` for ``steps`` optimizer steps, recording into ``root``: ``wandb/offline-run-*``,
    ``out/runs/*/events.out.tfevents.*`` and (``live``) ``live/monitor.jsonl``; ``root``."""
    import wandb

    from grpo_monitor.integrations import trl as gtrl
    from grpo_monitor.sinks import JSONLSink

    os.environ["WANDB_DIR"] = str(root)
    root.mkdir(parents=True, exist_ok=True)
    spec = {**RUNS[name], **extra}
    funcs = spec.pop("reward_funcs")
    wandb.teardown()
    try:
        trainer = make_trainer(model_path, root / "out", reward_funcs=funcs, prompts=PROMPTS, dataset_size=200,
                               max_steps=steps, per_device_train_batch_size=16, num_generations=4, seed=1,
                               log_completions=True, num_completions_to_print=0,
                               report_to=["wandb", "tensorboard"], **spec)
        if live:
            gtrl.attach(trainer, sinks=[JSONLSink(root / "live" / "monitor.jsonl")])
        trainer.train()
        wandb.finish()
    finally:
        wandb.teardown()
    return root


if __name__ == "__main__":
    out = Path(sys.argv[1])
    model = build_tiny_model(out / "model")
    for run in sys.argv[2:] or list(RUNS):
        record_run(run, model, out / run, steps=int(os.environ.get("STEPS", "10")))
        print("recorded", out / run)
