"""The old home of the universal invariants: they live in :mod:`grpo_monitor.invariants.universal` now, with
every other invariant. This path keeps working (the same objects)."""

from __future__ import annotations

from ..invariants.universal import MAX_RATIO, UNIVERSAL, UNIVERSAL_PROMISES, Breach, universal_breach

__all__ = ["MAX_RATIO", "UNIVERSAL", "UNIVERSAL_PROMISES", "Breach", "universal_breach"]
