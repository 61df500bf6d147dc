"""A short monitored run for the tracker sinks' tests: healthy steps, optionally a breach, a JSONL log beside."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig
from grpo_monitor.sinks import JSONLSink, read_jsonl
from grpo_monitor.sinks.base import Sink
from grpo_monitor.testing import RecordingSink

G = 4
QUESTIONS = ["q0", "q1", "q2", "q3"]


def rollout(step: int, broken: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Binary rewards (4 groups of 4, one constant) and their population-std advantages (+0.3 when broken)."""
    g = torch.Generator().manual_seed(step)
    rewards = (torch.rand(4, G, generator=g) < 0.5).double()
    rewards[0] = 1.0
    rewards[1, :2], rewards[1, 2:] = 1.0, 0.0
    centred = rewards - rewards.mean(1, keepdim=True)
    advantages = centred / (rewards.std(1, unbiased=False, keepdim=True) + 1e-6)
    return rewards, advantages + (0.3 if broken else 0.0)


def monitored_run(tmp_path: Path, sinks: Sequence[Sink], steps: int = 3, breach_at: int | None = None,
                  recorder: RecordingSink | None = None) -> list[dict]:
    """``steps`` steps through a monitor with ``sinks`` plus a JSONL log (and ``recorder``); the JSONL records."""
    log = tmp_path / "monitor.jsonl"
    config = MonitorConfig(group_size=G, std_convention="population", repro_dir=str(tmp_path / "repro"),
                           table_every=2)
    monitor = GRPOMonitor(config, sinks=[JSONLSink(log), *sinks, *([recorder] if recorder else [])])
    try:
        for step in range(steps):
            rewards, advantages = rollout(step, broken=step == breach_at)
            if step == breach_at:
                with pytest.raises(InvariantViolation, match="zero_group_mean"):
                    monitor.observe_rollout(rewards, advantages=advantages, question_ids=QUESTIONS)
                break
            monitor.observe_rollout(rewards, advantages=advantages, question_ids=QUESTIONS)
            monitor.end_step()
    finally:
        monitor.close()
    return read_jsonl(log)
