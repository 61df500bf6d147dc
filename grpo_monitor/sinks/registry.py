"""Sinks by name: the one table ``sinks="auto"``, ``GRPO_MONITOR_CONFIG``'s ``"sinks"`` and the lazy exports read.

Each row (:class:`SinkKind`) names a sink: the submodule and class that define it (imported only
when a sink is built), the argument its spec takes (``jsonl:PATH``), the optional package it needs
and the ``pip install grpo-monitor[extra]`` that installs it, and the trainer tracker names
(``report_to``, ``trainer.logger``, ...) that ``sinks="auto"`` turns into it. A sink class builds
itself from a spec argument (:meth:`~grpo_monitor.sinks.Sink.from_spec`) and from a trainer's
tracker (:meth:`~grpo_monitor.sinks.Sink.for_tracker`). Adding a sink is its module plus one row.

>>> SPECS
('auto', 'jsonl:PATH', 'tensorboard:DIR', 'wandb', 'trackio', 'mlflow', 'console', 'webhook:URL')
>>> TRACKERS["wandb"].cls, SINKS["jsonl"].extra
('WandbSink', None)
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from typing import Any

from .base import Sink, require


@dataclasses.dataclass(frozen=True)
class SinkKind:
    """One sink by name.

    ``module``/``cls``: where it is defined (a submodule of :mod:`grpo_monitor.sinks`).
    ``argument``: what its spec's ``name:ARGUMENT`` holds (``""``: the spec takes none);
    ``required``: whether the argument must be given (a path). ``backend``: the optional
    package it imports on first use, ``extra``: the extra of ``pip install grpo-monitor[extra]``
    that installs it. ``trackers``: the trainer tracker names ``sinks="auto"`` builds it for.
    ``exports``: the module's other public names, exported lazily by :mod:`grpo_monitor.sinks`.
    """

    name: str
    module: str
    cls: str
    argument: str = ""
    required: bool = False
    backend: str | None = None
    extra: str | None = None
    trackers: tuple[str, ...] = ()
    exports: tuple[str, ...] = ()

    @property
    def spec(self) -> str:
        """How ``GRPO_MONITOR_CONFIG``'s ``"sinks"`` names it: ``name`` or ``name:ARGUMENT``."""
        return f"{self.name}:{self.argument}" if self.argument else self.name

    def load(self) -> type[Sink]:
        """The sink class (its module imported now; the backend still only on first use)."""
        return getattr(importlib.import_module(f".{self.module}", __package__), self.cls)


#: Every sink by name, in the order the specs are listed.
SINKS: dict[str, SinkKind] = {k.name: k for k in (
    SinkKind("jsonl", "jsonl", "JSONLSink", "PATH", required=True, exports=("read_jsonl",)),
    SinkKind("tensorboard", "tensorboard_sink", "TensorBoardSink", "DIR", required=True, backend="tensorboard",
             extra="tensorboard", trackers=("tensorboard",)),
    SinkKind("wandb", "wandb_sink", "WandbSink", backend="wandb", extra="wandb", trackers=("wandb",)),
    SinkKind("trackio", "trackio_sink", "TrackioSink", backend="trackio", extra="trackio", trackers=("trackio",)),
    SinkKind("mlflow", "mlflow_sink", "MLflowSink", backend="mlflow", extra="mlflow", trackers=("mlflow",)),
    SinkKind("console", "console", "ConsoleSink", backend="rich", extra="console"),
    SinkKind("webhook", "webhook", "WebhookSink", "URL"),
)}
#: Trainer tracker name -> the sink ``sinks="auto"`` builds for it.
TRACKERS: dict[str, SinkKind] = {t: k for k in SINKS.values() for t in k.trackers}
#: Sink specs of ``GRPO_MONITOR_CONFIG``'s ``"sinks"``: a name, or ``name:argument``.
SPECS: tuple[str, ...] = ("auto", *(k.spec for k in SINKS.values()))


def lazy_exports() -> dict[str, str]:
    """Public name -> submodule, for :mod:`grpo_monitor.sinks`' lazy exports: each sink class and its exports."""
    return {name: k.module for k in SINKS.values() for name in (k.cls, *k.exports)}


def require_backend(name: str, what: str) -> None:
    """Raise ``ModuleNotFoundError`` naming ``what`` and the extra that installs sink ``name``'s backend, when
    that package is not installed (:func:`~grpo_monitor.sinks.base.require`; nothing is imported)."""
    kind = SINKS[name]
    assert kind.backend is not None and kind.extra is not None, f"sink {name!r} declares no backend"
    require(kind.backend, what, kind.extra)


def sink_for_tracker(name: str, output_dir: str | os.PathLike | None,
                     tensorboard_dir: str | os.PathLike | None) -> Sink:
    """The sink for the trainer's tracker ``name`` (a key of :data:`TRACKERS`), logging into the trainer's run."""
    return TRACKERS[name].load().for_tracker(output_dir=output_dir, tensorboard_dir=tensorboard_dir)


def sink_from_spec(spec: Any) -> Sink | str:
    """The sink a spec names (``"jsonl:PATH"``, ``"wandb"``, ...); ``"auto"`` stays the string ``"auto"``."""
    if not isinstance(spec, str):
        raise ValueError(f"a sink spec must be a string such as {list(SPECS)}, but got {spec!r}")
    name, _, arg = spec.partition(":")
    name = name.strip().lower()
    if name == "auto" and not arg:
        return "auto"
    kind = SINKS.get(name)
    if kind is None or (arg and not kind.argument):
        raise ValueError(f"unknown sink spec {spec!r}; expected one of {list(SPECS)}")
    if kind.required and not arg:
        raise ValueError(f"sink spec {spec!r} needs a path: {kind.spec}")
    return kind.load().from_spec(arg if kind.argument else None)
