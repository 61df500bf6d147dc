"""The old home of the invariant records: they live in :mod:`grpo_monitor.invariants` now, beside the code that
checks them. This path keeps working (the same objects)."""

from __future__ import annotations

from ..invariants import (
                          DEVICE_PROMISES,
                          GROUP_INVARIANTS,
                          INVARIANTS,
                          PROMISED,
                          RESIDUE_RULE,
                          ROOT_CAUSES,
                          Invariant,
                          Severity,
                          Side,
                          invariant,
)
from ..invariants.record import MonitorConfig

__all__ = ["DEVICE_PROMISES", "GROUP_INVARIANTS", "INVARIANTS", "PROMISED", "RESIDUE_RULE", "ROOT_CAUSES",
           "Invariant", "MonitorConfig", "Severity", "Side", "invariant"]
