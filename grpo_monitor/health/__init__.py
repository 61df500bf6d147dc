"""Run health: is the run learning, and if not, why. Findings with their evidence and remedies.

:mod:`.catalog` holds the findings (records: :data:`FINDINGS`), :mod:`.tracker` the
:class:`HealthTracker` that folds each step's synced metrics into them (the live monitor and
``grpo-monitor doctor`` share it), :mod:`.state` what it hands out, :mod:`.export` the question
export (:func:`questions`). Imports only the core (config, catalog, report, run).
"""

from __future__ import annotations

from .catalog import FINDINGS, SEVERITIES, Finding
from .export import questions
from .state import FindingState, HealthUpdate, QuestionSupply
from .tracker import HealthTracker

__all__ = ["FINDINGS", "SEVERITIES", "Finding", "FindingState", "HealthTracker", "HealthUpdate", "QuestionSupply",
           "questions"]
