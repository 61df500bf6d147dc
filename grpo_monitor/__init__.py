"""grpo-monitor: what a GRPO update is really made of, checked every step.

>>> from grpo_monitor import GRPOMonitor, MonitorConfig
>>> GRPOMonitor(MonitorConfig(group_size=8)).config.std_convention
'auto'

Exports are lazy (as in :mod:`grpo_monitor.sinks`): ``import grpo_monitor`` imports
neither torch nor pydantic, so the ``grpo-monitor`` command line starts at once; each
name is imported from its module on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Public name -> submodule that defines it.
_LAZY = {
    "ESTIMATORS": "estimators.registry",
    "GRPOMonitor": "monitor",
    "INVARIANTS": "violations",
    "InvariantViolation": "violations",
    "MonitorConfig": "config",
    "StepReport": "report",
    "Tolerances": "config",
    "Violation": "violations",
    "load_repro": "repro.replay",
    "replay": "repro.replay",
    "METRICS": "catalog.metrics",
    "RunStalled": "errors",
    "FINDINGS": "catalog.findings",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:  # what static tools see; at run time __getattr__ imports on first access
    from .catalog.findings import FINDINGS as FINDINGS
    from .catalog.metrics import METRICS as METRICS
    from .errors import RunStalled as RunStalled
    from .config import MonitorConfig as MonitorConfig
    from .config import Tolerances as Tolerances
    from .estimators.registry import ESTIMATORS as ESTIMATORS
    from .monitor import GRPOMonitor as GRPOMonitor
    from .report import StepReport as StepReport
    from .repro.replay import load_repro as load_repro
    from .repro.replay import replay as replay
    from .violations import INVARIANTS as INVARIANTS
    from .violations import InvariantViolation as InvariantViolation
    from .violations import Violation as Violation


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
