"""Deprecated: :mod:`grpo_monitor.stats.scale_fit` under its name before 0.4 (one ``DeprecationWarning``)."""

from __future__ import annotations

import warnings

from .scale_fit import CONVENTIONS, convention_base, scale_factor, stabilizer_range, stabilizer_residuals

__all__ = ["CONVENTIONS", "convention_base", "scale_factor", "stabilizer_range", "stabilizer_residuals"]

warnings.warn("grpo_monitor.stats.conventions is deprecated: it is grpo_monitor.stats.scale_fit (the classic "
              "estimators' scale fit)", DeprecationWarning, stacklevel=2)
