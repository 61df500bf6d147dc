"""Real TRL runs for the run-health tests and calibration: healthy, degenerate-dominated, truncated, collapsing.

Each scenario is a ``GRPOTrainer`` on the tiny on-disk Llama (:mod:`tiny_trl`) with the monitor attached and a
JSONL log; :func:`run` trains it and returns the monitor's step reports. Nothing is mocked: the stall comes
from the reward, the length limit or the learning rate, as in the runs the issue names.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tiny_trl import char_fraction_reward, make_trainer, space_reward

#: Prompts whose reward is 1.0 whatever the completion: a verifier that always passes (saturated questions).
SATURATED = tuple(f"easy {c}" for c in string.ascii_lowercase[:18])
#: Prompts with a real reward (the fraction of 'a' among the completion's characters).
LEARNABLE = ("spell a", "say bb", "a b c", "cab")


def mostly_constant_reward(prompts: Sequence[str], completions: Sequence[str], **_: Any) -> list[float]:
    """1.0 for the saturated prompts, the fraction of 'a' (0 for an empty completion) otherwise."""
    return [1.0 if p in SATURATED else (c.count("a") / len(c) if c else 0.0)
            for p, c in zip(prompts, completions, strict=True)]


def mixed_prompts(saturated_share: float, n: int = 40) -> list[str]:
    """``n`` prompts, about ``saturated_share`` of them saturated, interleaved (every batch sees both kinds)."""
    out, sat, learn = [], 0, 0
    for i in range(n):
        if sat < saturated_share * (i + 1):
            out.append(SATURATED[sat % len(SATURATED)])
            sat += 1
        else:
            out.append(LEARNABLE[learn % len(LEARNABLE)])
            learn += 1
    return out


#: name -> GRPOConfig overrides and reward functions of each scenario (see the module docstring).
SCENARIOS: dict[str, dict[str, Any]] = {
    "healthy-group-grpo": dict(scale_rewards="group", loss_type="grpo"),
    "healthy-batch-dapo": dict(scale_rewards="batch", loss_type="dapo"),
    "healthy-none-drgrpo": dict(scale_rewards="none", loss_type="dr_grpo"),
    "degenerate": dict(reward_funcs=[mostly_constant_reward], prompts=mixed_prompts(0.9)),
    "truncated": dict(mask_truncated_completions=True, max_completion_length=2),
    "collapse": dict(learning_rate=0.1, beta=0.0),
}


def run(model_path: str, out: Path, scenario: str, steps: int, *, config: Any = None, seed: int = 0,
        prompts: Sequence[str] | None = None, **overrides: Any) -> tuple[Any, list[Any]]:
    """Train ``scenario`` for ``steps`` optimizer steps with the monitor attached (JSONL log ``out/grpo.jsonl``);
    the monitor and its step reports. ``overrides`` go to the ``GRPOConfig`` (``prompts``: the dataset)."""
    from grpo_monitor.integrations import trl as gtrl
    from grpo_monitor.sinks import JSONLSink

    kwargs = dict(SCENARIOS[scenario])
    kwargs.update(overrides)
    reward_funcs = kwargs.pop("reward_funcs", [char_fraction_reward(), space_reward])
    data = list(prompts if prompts is not None else kwargs.pop("prompts", ()) or ())
    kwargs.pop("prompts", None)
    extra = dict(prompts=data, dataset_size=len(data)) if data else dict(dataset_size=8 * steps)
    trainer = make_trainer(model_path, out / "trainer", reward_funcs=reward_funcs, max_steps=steps, seed=seed,
                           **extra, **kwargs)
    monitor = gtrl.attach(trainer, config=config, sinks=[JSONLSink(out / "grpo.jsonl")])
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, gtrl.GRPOMonitorCallback))
    reports: list[Any] = []
    callback.reports = _Keep(reports)
    trainer.train()
    return monitor, reports


class _Keep(list):
    """The callback's report store, unbounded and shared with the caller (the callback keeps a deque)."""

    def __init__(self, target: list[Any]):
        super().__init__()
        self.target = target

    def append(self, item: Any) -> None:
        self.target.append(item)
