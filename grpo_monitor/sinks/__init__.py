"""Sinks: where step reports go (JSONL, TensorBoard, W&B, Trackio, MLflow, console, a chat webhook).

Exports are lazy: ``from grpo_monitor.sinks import JSONLSink`` imports neither wandb,
tensorboard, trackio, mlflow nor rich; each backend is imported by the sink method that first needs it.
"""

from __future__ import annotations

import importlib
from typing import Any

from .base import Sink
from .dispatch import SinkSet, SinkWarning

#: Public name -> submodule that defines it.
_LAZY = {
    "JSONLSink": "jsonl",
    "read_jsonl": "jsonl",
    "TensorBoardSink": "tensorboard_sink",
    "WandbSink": "wandb_sink",
    "TrackioSink": "trackio_sink",
    "MLflowSink": "mlflow_sink",
    "sinks_for_trackers": "auto",
    "tracker_names": "auto",
    "ConsoleSink": "console",
    "WebhookSink": "webhook",
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
