"""Step boundaries for a Hugging Face ``Trainer``, and for plain PyTorch loops.

The monitor is driven by three calls: ``observe_rollout`` (rewards and advantages of the
step's rollout), ``observe_loss`` (token tensors of each micro-batch) and ``end_step``.
A custom ``Trainer`` makes the first two in its own code (e.g. ``compute_loss``);
:class:`MonitorCallback` makes the third at every optimizer step and closes the monitor
when training ends. A plain loop uses :func:`monitored_steps`.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from grpo_monitor.config import MonitorConfig
from grpo_monitor.monitor import GRPOMonitor
from grpo_monitor.sinks.base import Sink
from grpo_monitor.step.calls import checked

if TYPE_CHECKING:
    from transformers import TrainerCallback as _CallbackBase
else:
    try:  # transformers is optional: only MonitorCallback needs it
        from transformers import TrainerCallback as _CallbackBase
    except ImportError:  # pragma: no cover - exercised without the extra
        _CallbackBase = object

T = TypeVar("T")
#: Step reports a callback keeps (the most recent ones) in ``callback.reports``.
REPORTS_KEPT = 100


def sinks_for(args: Any) -> list[Sink]:
    """The sinks matching a ``TrainingArguments``' ``report_to`` (``"all"`` and lists included).

    ``"wandb"``, ``"trackio"`` and ``"mlflow"`` give sinks that log into the run the trainer
    opens (W&B's active run, the training thread's Trackio and MLflow runs); ``"tensorboard"``
    a :class:`~grpo_monitor.sinks.TensorBoardSink` in the trainer's logging folder. Other
    trackers are named once in a warning; with none left (``report_to="none"``) the monitor
    writes ``<output_dir>/grpo-monitor/monitor.jsonl`` and prints its path
    (:func:`grpo_monitor.sinks.auto.sinks_for_trackers`).
    """
    from grpo_monitor.sinks.auto import sinks_for_trackers, tracker_names

    output_dir = getattr(args, "output_dir", None)
    logging_dir = getattr(args, "logging_dir", None) or (os.path.join(output_dir, "runs") if output_dir else "runs")
    return sinks_for_trackers(tracker_names(getattr(args, "report_to", None)), framework="transformers",
                              output_dir=output_dir, tensorboard_dir=logging_dir)


def resolve_sinks(sinks: Sequence[Sink] | str | None, args: Any) -> list[Sink]:
    """``"auto"`` -> :func:`sinks_for` ``(args)``; ``None`` -> no sink; a list as given."""
    if sinks == "auto":
        return sinks_for(args)
    if sinks is None:
        return []
    if isinstance(sinks, str):
        raise ValueError(f"sinks must be 'auto', None or a list of Sink objects, but got the string {sinks!r}")
    return list(sinks)


class MonitorCallback(_CallbackBase):
    """Ends the monitor's step at every optimizer step; closes it when training ends.

    ``end_step(step=state.global_step)`` runs in ``on_step_end``, so the ``grpo/...``
    metrics share the trainer's step axis, and a breach raises ``InvariantViolation`` out
    of ``trainer.train()``. The last :data:`REPORTS_KEPT` reports are kept in ``reports``.
    """

    def __init__(self, monitor: GRPOMonitor, *, close_on_train_end: bool = True):
        if not isinstance(monitor, GRPOMonitor):
            raise TypeError(f"monitor must be a GRPOMonitor, but got {type(monitor).__name__}")
        self.monitor = monitor
        self.close_on_train_end = close_on_train_end
        self.reports: collections.deque = collections.deque(maxlen=REPORTS_KEPT)

    def extra_metrics(self) -> dict[str, float]:
        """Metrics added to the step's report (subclasses compare with their trainer's own)."""
        return {}

    def on_train_begin(self, args, state, control, **kwargs):
        """A second ``train()`` on the same trainer is monitored again (sinks reopen on use)."""
        if self.monitor.closed:
            self.monitor.reopen()

    def on_step_end(self, args, state, control, **kwargs):
        """Close the monitor's step (one sync); raises on a breach."""
        mon = self.monitor
        if mon.closed:
            return
        extra = self.extra_metrics()
        if extra and hasattr(mon, "add_metrics"):
            mon.add_metrics(extra)
        self.reports.append(mon.end_step(step=state.global_step))

    def on_train_end(self, args, state, control, **kwargs):
        """Finish the sinks (the W&B run the trainer owns stays open for it to finish)."""
        if self.close_on_train_end:
            self.monitor.close()

    def state_dict(self) -> dict[str, Any]:
        """The monitor's resumable state (history, locked convention, counters)."""
        return self.monitor.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.monitor.load_state_dict(state)


@checked
def attach(trainer: Any, monitor: GRPOMonitor | None = None, *, config: MonitorConfig | None = None,
           sinks: Sequence[Sink] | str | None = "auto") -> GRPOMonitor:
    """Add a :class:`MonitorCallback` to ``trainer``; returns the monitor it drives.

    With no ``monitor``, one is built from ``config`` and ``sinks`` (``"auto"``: the
    sinks of the trainer's ``report_to``). The observe calls stay in the user's code.
    """
    if monitor is None:
        monitor = GRPOMonitor(config, sinks=resolve_sinks(sinks, trainer.args))
    elif config is not None:
        raise ValueError("pass either monitor or config to attach(), not both")
    trainer.add_callback(MonitorCallback(monitor))
    return monitor


def monitored_steps(monitor: GRPOMonitor, steps: Iterable[T], *, close: bool = True) -> Iterator[T]:
    """Yield the items of ``steps``; call ``monitor.end_step()`` after each, ``close()`` at the end.

    A breach raises ``InvariantViolation`` from the loop (the monitor is then closed).

    >>> import torch
    >>> from grpo_monitor import MonitorConfig
    >>> mon = GRPOMonitor(MonitorConfig(group_size=2))
    >>> for r in monitored_steps(mon, [torch.tensor([[1., 0.]])]):
    ...     mon.observe_rollout(r, advantages=torch.tensor([[1., -1.]]))
    >>> mon.step, mon.closed
    (1, True)
    """
    try:
        for item in steps:
            yield item
            monitor.end_step()
    finally:
        if close:
            monitor.close()
