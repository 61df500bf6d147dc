"""``grpo-monitor doctor``: the run-health findings of a finished run, from what it recorded.

:mod:`.recording` reads one metrics dict per step from a grpo-monitor log, from recorded rollouts
(replayed through ``scan``) or from the trainer's own logged scalars (W&B offline, TensorBoard, verl's
file logger); :mod:`.diagnose` folds them through the live :class:`~grpo_monitor.health.HealthTracker`;
:mod:`.text` words the result. See ``docs/health_offline.md``.
"""

from __future__ import annotations

from .diagnose import STATUS, Diagnosis, FindingRecord, diagnose, fails
from .recording import Recording, read_recording
from .text import format_diagnosis

__all__ = ["STATUS", "Diagnosis", "FindingRecord", "Recording", "diagnose", "fails", "format_diagnosis",
           "read_recording"]
