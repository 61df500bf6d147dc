"""What a violation does under the run's ``on_violation`` policy: raise, warn (and how often), or nothing. (A breach
to raise gets its repro file from :func:`grpo_monitor.run.breach.with_repro`, called by the monitor.)

The counts are the run's (:class:`~grpo_monitor.run.state.RunState`); the monitor counts a
step's findings first, then calls :func:`warn_found`.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable, Mapping

from ..config import MonitorConfig
from ..invariants import INVARIANTS
from ..violations import Violation

log = logging.getLogger("grpo_monitor")


def raises(v: Violation, config: MonitorConfig) -> bool:
    """An error-severity breach under the ``"raise"`` policy; a warning never stops the run."""
    return v.severity == "error" and config.policy_for(v.invariant) == "raise"


def warn_found(found: Iterable[Violation], counts: Mapping[str, int], config: MonitorConfig) -> None:
    """Log what is neither ignored nor raised: the 1st, 2nd, 4th, 8th, ... occurrence of an invariant (a
    recurring warning stays readable), and one ``RuntimeWarning`` per invariant, on its first occurrence (every
    occurrence of an invariant whose findings are each said once, ``said_once``)."""
    for v in found:
        policy = config.policy_for(v.invariant)
        if policy == "ignore" or (policy == "raise" and v.severity == "error"):
            continue
        count, each = counts[v.invariant], INVARIANTS[v.invariant].said_once
        if count & (count - 1) == 0 or each:
            log.warning("grpo-monitor: %s (occurrence %d)", v.message(), count)
        if count == 1 or each:
            warnings.warn(f"grpo-monitor: {v.message()} (warned once per invariant; counts in the report)",
                          RuntimeWarning, stacklevel=1)


def say_once(text: str | None, said: set[str]) -> None:
    """Log and warn ``text`` (a note about the run, not a violation) the first time it comes; ``said`` remembers."""
    if text is None or text in said:
        return
    said.add(text)
    log.warning(text)
    warnings.warn(text, RuntimeWarning, stacklevel=1)


def unfinished_text(step: int, steps_ended: int) -> str:
    """The warning of ``close()`` ending a step that had data observed but no ``end_step()``."""
    text = f"grpo-monitor: close() ended step {step}, which had data observed but no end_step()"
    if not steps_ended:
        text += ("; end_step() was never called on this monitor: call it once per training step (the "
                 "integrations do), else nothing reaches the sinks until close()")
    return text
