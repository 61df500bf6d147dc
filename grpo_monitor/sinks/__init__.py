"""Sinks: where step reports go (JSONL, TensorBoard, W&B, Trackio, MLflow, console, a chat webhook), by name in
:mod:`grpo_monitor.sinks.registry`.

Exports are lazy: ``from grpo_monitor.sinks import JSONLSink`` imports neither wandb,
tensorboard, trackio, mlflow nor rich; each backend is imported by the sink method that first needs it.
"""

from __future__ import annotations

import importlib
from typing import Any

from .base import Sink
from .dispatch import SinkSet, SinkWarning
from .registry import lazy_exports

#: Public name -> submodule that defines it: each sink of the registry (its class and exports), and the helpers.
_LAZY = {
    **lazy_exports(),
    "sinks_for_trackers": "auto",
    "tracker_names": "auto",
    "read_wandb_records": "wandb_reader",
    "build_workspace": "wandb_workspace",
}

__all__ = ["Sink", "SinkSet", "SinkWarning", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
