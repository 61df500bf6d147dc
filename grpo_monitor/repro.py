"""Save the tensors of a breach so it can be reproduced offline, and load them back."""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any, Sequence

import torch

from .config import MonitorConfig

if TYPE_CHECKING:
    from .report import StepReport


def repro_dir(config: MonitorConfig) -> str:
    """Where breach files go: ``config.repro_dir``, else ``grpo-monitor-repro`` in the temp folder."""
    return config.repro_dir or os.path.join(tempfile.gettempdir(), "grpo-monitor-repro")


def save_repro(config: MonitorConfig, step: int, state: Any, violations: Sequence[Any]) -> str | None:
    """Write the step's rollouts (rewards, group index, labels, advantages) to a ``.pt`` file.

    Returns the path, or None when saving failed (a full disk must not hide the breach).
    """
    rollouts = [
        {
            "rewards": r.rewards.detach().cpu(),
            "group_index": r.gid.detach().cpu(),
            "group_labels": [str(x) for x in r.labels],
            "advantages": None if r.advantages is None else r.advantages.detach().cpu(),
        }
        for r in state.rollouts
    ]
    payload = {
        "step": step,
        "config": config.model_dump(),
        "invariants": [v.invariant for v in violations],
        "rollouts": rollouts,
    }
    try:
        folder = repro_dir(config)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"step{step:06d}-pid{os.getpid()}.pt")
        torch.save(payload, path)
        return path
    except OSError:
        return None


def load_repro(path: str) -> dict[str, Any]:
    """The saved breach: ``step``, ``config``, ``invariants`` and ``rollouts``.

    Replay it with :func:`replay`. The file holds tensors and plain Python values only, so it
    loads with ``weights_only=True`` (no pickled code runs).
    """
    return torch.load(path, weights_only=True)


def replay(path: str, **config_overrides: Any) -> "StepReport":
    """Feed a saved breach to a fresh monitor (policy ``"ignore"``) and return its report."""
    from .monitor import GRPOMonitor

    data = load_repro(path)
    cfg = {**data["config"], "on_violation": "ignore", "policies": {}, **config_overrides}
    mon = GRPOMonitor(MonitorConfig(**cfg))
    for r in data["rollouts"]:
        mon.observe_rollout(r["rewards"], group_ids=r["group_index"], advantages=r["advantages"])
    return mon.end_step(data["step"])
