"""A breach to raise gets its repro file: the step's rollouts and the estimator lock the run had reached.

Called by the monitor between evaluating a step and applying it, so the report and the raised
:class:`~grpo_monitor.violations.InvariantViolation` name the file. The file format is
:mod:`grpo_monitor.repro.save`'s; this module keeps the step package from importing it (repro reads the step's
records, so it sits above step; the monitor reaches it through here, as :mod:`grpo_monitor.repro.replay` imports
the monitor).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..config import MonitorConfig
from ..repro.save import save_repro
from ..step.policy import raises
from ..violations import Violation


def with_repro(found: list[Violation], config: MonitorConfig, step: int, acc: Any,
               lock: Callable[[], dict[str, Any]]) -> list[Violation]:
    """Breaches to raise get their repro file of ``acc`` (the step's accumulator), or why it could not be saved
    (``save_repro`` never raises); ``lock()``: the estimator lock's state, read only when a file is written."""
    raising = [v for v in found if raises(v, config)]
    if not raising:
        return found
    path, why = save_repro(config, step, acc, raising, lock=lock())
    return [dataclasses.replace(v, repro_path=path, repro_error=why) if raises(v, config) else v for v in found]
