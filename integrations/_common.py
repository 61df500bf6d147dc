"""What the integrations share: failing open, row advantages from token ones, and finding the trainer a callback
belongs to."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from grpo_monitor.monitor import GRPOMonitor
from grpo_monitor.step.guard import integration_part
from grpo_monitor.step.inputs import InputError
from grpo_monitor.violations import InvariantViolation


class FailOpen:
    """Runs an integration's observation code; its own faults never stop training.

    ``InvariantViolation`` and input errors propagate (they are the point). Any other
    exception is a fault of the monitor part ``"<name> integration"``, kept by the
    monitor's own fail-open bookkeeping (:class:`grpo_monitor.step.guard.Faults`): logged once
    with its traceback, warned, and the integration is switched off for the rest of the
    step, retried on the next (off for the run after ``PART_FAULTS`` faults in a row).
    Like the monitor's own parts, that shows in ``monitor.disabled_parts``, in
    ``grpo/monitor/disabled_parts``, ``grpo/monitor/retried_parts`` and, when it is off
    for the run, as one alert through every sink. With
    ``monitor.config.strict`` the exception is re-raised instead (for tests).

    Building it names the integration to the monitor (``declare_integration``), so the
    run record says which trainer the run came from.
    """

    def __init__(self, monitor: GRPOMonitor, name: str):
        self.monitor = monitor
        self.name = name
        self.part = integration_part(name)
        if monitor.integration != name:
            monitor.declare_integration(name)

    @property
    def disabled(self) -> bool:
        """Whether a fault switched the integration off (it then does nothing); a fault on an
        earlier step is retried here, on the first call of a later step."""
        faults = self.monitor.gate.faults
        return self.part in faults.disabled and not faults.retry(self.part, self.monitor.step)

    def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.disabled:
            return None
        try:
            return fn(*args, **kwargs)
        except (InvariantViolation, InputError):
            raise
        except Exception:
            if self.monitor.config.strict:
                raise
            self.fault()
            return None

    def fault(self) -> None:
        """Record the fault being handled as the monitor records its own; announce the switch-off."""
        monitor, gate = self.monitor, self.monitor.gate
        with gate.lock:  # the faults are the monitor's state: changed under its one lock
            disabled = gate.faults.record(self.part, monitor.step, label=f"the {self.name} integration")
            if disabled and not monitor.closed:  # a closed monitor's sinks are finished: reopen none of them
                gate.faults.announce(self.part, monitor.step, monitor.sinks)


def row_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """One advantage per row: ``(B,)`` as is, ``(B, T)`` token advantages as the mean over valid tokens.

    >>> row_advantages(torch.tensor([[2., 2., 9.]]), torch.tensor([[1, 1, 0]])).tolist()
    [2.0]
    """
    if advantages.dim() == 1:
        return advantages
    m = mask.to(advantages.dtype)
    return (advantages * m).sum(-1) / m.sum(-1).clamp(min=1.0)


def outcome_only(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> bool:
    """Whether every token reward but each row's last valid one is 0 (an outcome reward, no per-token term).

    >>> outcome_only(torch.tensor([[0.0, 1.0, 0.0]]), torch.tensor([[1, 1, 0]]))
    True
    """
    valid = response_mask.bool()
    last = valid & (valid.cumsum(-1) == valid.sum(-1, keepdim=True))
    return not bool((token_level_rewards.masked_fill(last, 0.0) != 0).any())


def find_trainer(callback: Any) -> Any:
    """The ``transformers.Trainer`` whose callback handler holds ``callback``.

    A ``TrainerCallback`` is never handed its trainer; the trainer is the ``self`` of a
    frame up the stack while it runs its callbacks (e.g. ``on_train_begin``).
    """
    frame = inspect.currentframe()
    try:
        while frame is not None:
            obj = frame.f_locals.get("self")
            handler = getattr(obj, "callback_handler", None)
            if handler is not None and any(cb is callback for cb in getattr(handler, "callbacks", ())):
                return obj
            frame = frame.f_back
    finally:
        del frame
    raise RuntimeError(
        f"{type(callback).__name__} could not find the trainer it belongs to; expected to be called from a "
        "transformers Trainer's callback handler. Use the module's attach(trainer) instead."
    )
