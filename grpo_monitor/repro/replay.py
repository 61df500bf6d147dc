"""Reproduce a breach offline: load the file :func:`grpo_monitor.repro.save.save_repro` wrote, and replay it.

Saving lives in :mod:`grpo_monitor.repro.save` (the monitor imports it); this module imports the
monitor, so the two never import each other.
"""

from __future__ import annotations

from typing import Any

import torch

from ..config import MonitorConfig
from ..monitor import GRPOMonitor
from ..report import StepReport


def load_repro(path: str) -> dict[str, Any]:
    """The saved breach: ``step``, ``config``, ``invariants`` and ``rollouts``.

    Replay it with :func:`replay`. The file holds tensors and plain Python values only, so it
    loads with ``weights_only=True`` (no pickled code runs).
    """
    return torch.load(path, weights_only=True)


def replay(path: str, **config_overrides: Any) -> StepReport:
    """Feed a saved breach to a fresh monitor (policy ``"ignore"``) and return its report."""
    data = load_repro(path)
    cfg = {**data["config"], "on_violation": "ignore", "policies": {}, **config_overrides}
    mon = GRPOMonitor(MonitorConfig(**cfg))
    for r in data["rollouts"]:
        mon.observe_rollout(r["rewards"], group_ids=r["group_index"], advantages=r["advantages"])
    return mon.end_step(data["step"])
