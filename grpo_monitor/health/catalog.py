"""The findings catalogue as the health package names it (the records live in :mod:`grpo_monitor.catalog.findings`,
where the configuration can read their names without importing the tracker)."""

from __future__ import annotations

from ..catalog.findings import FINDINGS, INTEGRATIONS, SEVERITIES, Finding, Severity

__all__ = ["FINDINGS", "INTEGRATIONS", "SEVERITIES", "Finding", "Severity"]
