"""Violations as data: a small record first, an exception or a warning second.

The record and the registry live in :mod:`grpo_monitor.invariants`; this module is their public path
(``grpo_monitor.INVARIANTS``, ``grpo_monitor.Violation``).
"""

from __future__ import annotations

from .errors import InvariantViolation as InvariantViolation  # its home; this old path keeps working
from .invariants import INVARIANTS as INVARIANTS
from .invariants.record import Violation as Violation

__all__ = ["INVARIANTS", "InvariantViolation", "Violation"]
