"""grpo-monitor: what a GRPO update is really made of, checked every step.

>>> from grpo_monitor import GRPOMonitor, MonitorConfig
>>> GRPOMonitor(MonitorConfig(group_size=8)).config.std_convention
'auto'
"""

from .config import MonitorConfig, Tolerances
from .monitor import GRPOMonitor
from .report import StepReport
from .repro import load_repro, replay
from .violations import INVARIANTS, InvariantViolation, Violation

__all__ = [
    "GRPOMonitor",
    "INVARIANTS",
    "InvariantViolation",
    "MonitorConfig",
    "StepReport",
    "Tolerances",
    "Violation",
    "load_repro",
    "replay",
]
__version__ = "0.1.0"
