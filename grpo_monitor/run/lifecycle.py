"""The monitor's lifecycle: ``close``/``reopen``, the ``with`` block, ``state_dict``/``load_state_dict``.

A mixin of :class:`~grpo_monitor.monitor.GRPOMonitor` (its own methods, kept apart so ``monitor.py`` reads as
the step pipeline). Closing finishes the sinks; a closed monitor refuses every observe call (the guard's
``Gate.closed_by`` says why); ``reopen`` starts a new segment with the same sinks. The state is what crosses
steps (:class:`~grpo_monitor.run.state.RunState` and the run health), validated whole before any change.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from ..step import policy
from .saved import check_config, validate_state
from .state import RunState

if TYPE_CHECKING:
    from ..config import MonitorConfig
    from ..health.live import LiveHealth
    from ..report import StepReport
    from ..sinks.dispatch import SinkSet
    from ..step.accumulator import Accumulator
    from ..step.guard import Gate


class Lifecycle:
    """``GRPOMonitor``'s close/reopen, context manager and saved state (see module docstring)."""

    config: MonitorConfig
    sinks: SinkSet
    step: int
    gate: Gate
    _run: RunState
    _health: LiveHealth
    _acc: Accumulator
    _extra: dict[str, float]
    _steps_ended: int
    _run_record_due: bool

    def end_step(self, step: int | None = None) -> StepReport:
        raise NotImplementedError  # GRPOMonitor's

    @property
    def closed(self) -> bool:
        """Whether ``close()`` (or a breach under ``"raise"``, or a stall ``halt_on`` names) closed the monitor."""
        return self.gate.closed

    def close(self) -> None:
        """Finish every sink (flushing what they still queue). A second ``close()`` does nothing. After it, every
        observe/``end_step``/``add_metrics`` call raises ``MonitorClosedError`` naming the call; ``state_dict()``
        still works."""
        with self.gate.lock:
            if not self.closed and self._unfinished():
                self._end_unfinished()
            self._close(failed=False)

    def _unfinished(self) -> bool:
        """Whether the current step holds observed data that no ``end_step`` has reported yet."""
        return self._acc.observed() or bool(self._extra)

    def _end_unfinished(self) -> None:
        """``close()`` with data observed since the last ``end_step``: end that step (a breach still raises)."""
        warnings.warn(policy.unfinished_text(self.step, self._steps_ended), RuntimeWarning, stacklevel=3)
        self.end_step()

    def _close(self, failed: bool, why: str = "close() was called") -> None:
        if self.closed:
            return
        self.gate.closed_by = why
        self.sinks.finish(failed=failed)

    def reopen(self) -> None:
        """Start a new segment after ``close()`` with the same sinks (they reopen their backends on first use: JSONL
        appends, W&B opens or attaches a run). The HF integration calls it when ``train()`` starts again."""
        with self.gate.lock:
            self.gate.closed_by = None
            self._run_record_due = True

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        with self.gate.lock:
            if exc_type is None:
                self.close()
                return
            if not self.closed and self._unfinished():
                warnings.warn(f"grpo-monitor: step {self.step} was observed but not ended when the with-block "
                              f"raised {exc_type.__name__}; its data is not reported", RuntimeWarning, stacklevel=2)
            self._close(failed=True)

    @property
    def tracked_questions(self) -> int:  # at most config.history_cap
        """Questions the per-question history holds now."""
        return len(self._run.questions.history)

    @property
    def violation_counts(self) -> dict[str, int]:
        """How many times each invariant broke so far."""
        return dict(self._run.counts)

    def state_dict(self) -> dict[str, Any]:
        """Step counter, estimator lock, per-question history, ledger totals, violation counts and run health, as
        plain Python values (numpy/torch question ids converted): ``json.dumps`` and ``torch.load`` take it."""
        with self.gate.lock:
            return {"step": self.step, **self._run.state_dict(), "health": self._health.state_dict()}

    def load_state_dict(self, state: dict[str, Any], *, allow_config_change: bool = False) -> None:
        """Restore :meth:`state_dict`; the next ``end_step`` continues as the saved run would. All or nothing: the
        state is validated first (:func:`~grpo_monitor.run.saved.validate_state`); a state of another declared group
        size or estimator is refused unless ``allow_config_change``."""
        with self.gate.lock:
            saved = validate_state(state)
            check_config(saved, self.config, allow_config_change)
            run, health = RunState(self.config), self._health.restored(saved.health)
            run.load_state_dict(saved.model_dump())
            self._run, self._health, self.step = run, health, saved.step
