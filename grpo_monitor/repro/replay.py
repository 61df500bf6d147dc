"""Reproduce a breach offline: load the file :func:`grpo_monitor.repro.save.save_repro` wrote, and replay it.

Saving lives in :mod:`grpo_monitor.repro.save` (the monitor imports it); this module imports the
monitor, so the two never import each other.
"""

from __future__ import annotations

from typing import Any

import torch

from ..config import MonitorConfig
from ..config.aliases import upgrade
from ..monitor import GRPOMonitor, load_estimator_lock
from ..report import StepReport
from .save import SavedRollout


def load_repro(path: str) -> dict[str, Any]:
    """The saved breach: ``format``, ``step``, ``config``, ``invariants``, ``rollouts`` and ``estimator_lock``.

    Replay it with :func:`replay`. The file holds tensors and plain Python values only, so it
    loads with ``weights_only=True`` (no pickled code runs).
    """
    return torch.load(path, weights_only=True)


def replay(path: str, **config_overrides: Any) -> StepReport:
    """Feed a saved breach to a fresh monitor (policy ``"ignore"``) and return its report.

    The monitor gets what the live check had: the same arguments (token counts included) and
    the estimator lock the run had reached, so it judges the step as the live check did.
    """
    data = load_repro(path)
    cfg = {**upgrade(data["config"]), "on_violation": "ignore", "policies": {}, **config_overrides}
    mon = GRPOMonitor(MonitorConfig(**cfg))
    if data.get("estimator_lock") and not config_overrides:
        load_estimator_lock(mon, data["estimator_lock"])
    for saved in data["rollouts"]:
        mon.observe_rollout(**SavedRollout.load(saved).observe_args())
    return mon.end_step(data["step"])
