"""Audit a finished run from the rollouts it recorded: ``grpo-monitor scan`` and ``grpo-monitor compare``.

Readers (one per format: verl's rollout dumps, TRL's completions tables in an offline
W&B run or as Parquet, generic JSONL and Parquet) yield one step of rows at a time;
:mod:`.groups` rebuilds the groups; :mod:`.run` feeds each step to the same
:class:`~grpo_monitor.GRPOMonitor` a live run uses and writes its outputs;
:mod:`.summary` prints what a user asks first; :mod:`.compare` puts two runs on one page.
See ``docs/scan.md``.

>>> from grpo_monitor.tools.scan import FORMATS
>>> FORMATS[:3]
('auto', 'verl', 'trl-wandb')
"""

from __future__ import annotations

from .columns import ColumnMap, ScanInputError, parse_columns
from .detect import FORMATS, detect_format, open_reader
from .groups import StepGroups, build_groups
from .rows import StepRows
from .run import ScanResult, scan_rollouts
from .summary import format_summary

__all__ = [
    "FORMATS", "ColumnMap", "ScanInputError", "ScanResult", "StepGroups", "StepRows", "build_groups",
    "detect_format", "format_summary", "open_reader", "parse_columns", "scan_rollouts",
]
