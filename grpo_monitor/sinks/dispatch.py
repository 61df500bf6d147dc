"""Hands each report to every sink, isolating their failures from training."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Callable, Iterable

from ..report import StepReport
from .base import Sink


class SinkWarning(RuntimeWarning):
    """A sink failed; training goes on."""


@dataclasses.dataclass
class SinkHealth:
    """Failure bookkeeping of one sink: the current streak, the steps left to skip."""

    consecutive_failures: int = 0
    total_failures: int = 0
    skip_left: int = 0
    disabled: bool = False
    warned: bool = False
    last_error: BaseException | None = None


class SinkSet:
    """The monitor's view of its sinks: ``emit(report)`` and ``finish(failed)``.

    A sink that raises never stops training or the other sinks. Its first failure is
    reported once as a :class:`SinkWarning` naming the sink and the exception; after the
    k-th consecutive failure it is skipped for the next 2**(k-1) steps (1, 2, 4, ...), and
    after ``max_failures`` consecutive failures it is disabled, with a final warning. A
    success resets the streak. A failing report (``report.failed``, the run's last step)
    goes to sinks that are backing off too. ``finish()`` is called on every sink, disabled
    ones included, whatever the others raise.

    Sinks with ``main_process_only`` are skipped when ``is_main_process`` is false;
    ``is_main_process`` may be a bool or a no-argument callable, checked at call time.
    """

    def __init__(
        self,
        sinks: Iterable[Sink],
        *,
        is_main_process: bool | Callable[[], bool] = True,
        max_failures: int = 5,
    ):
        if not isinstance(max_failures, int) or max_failures < 1:
            raise ValueError(f"Expected argument `max_failures` to be an int >= 1 but got {max_failures!r}")
        self.sinks = list(sinks)
        self.is_main_process = is_main_process
        self.max_failures = max_failures
        self.health: dict[int, SinkHealth] = {id(s): SinkHealth() for s in self.sinks}

    def _main(self) -> bool:
        main = self.is_main_process
        return bool(main() if callable(main) else main)

    def _active(self) -> list[Sink]:
        main = self._main()
        return [s for s in self.sinks if main or not s.main_process_only]

    def health_of(self, sink: Sink) -> SinkHealth:
        """The failure bookkeeping of ``sink`` (one of :attr:`sinks`)."""
        return self.health.setdefault(id(sink), SinkHealth())

    def emit(self, report: StepReport) -> None:
        """Hand ``report`` to every active sink that is not disabled or backing off."""
        for sink in self._active():
            health = self.health_of(sink)
            if health.disabled:
                continue
            if health.skip_left > 0 and not report.failed:
                health.skip_left -= 1
                continue
            try:
                sink.log_report(report)
            except Exception as exc:  # noqa: BLE001 - a sink must never stop training
                self._record_failure(sink, health, exc, report.step)
            else:
                health.consecutive_failures = 0
                health.skip_left = 0

    def _record_failure(self, sink: Sink, health: SinkHealth, exc: Exception, step: int) -> None:
        health.consecutive_failures += 1
        health.total_failures += 1
        health.last_error = exc
        streak = health.consecutive_failures
        if streak >= self.max_failures:
            health.disabled = True
            _warn(
                f"sink {sink.name!r} disabled after {streak} consecutive failures "
                f"(last at step {step}: {exc!r}); its output stops here"
            )
            return
        health.skip_left = 2 ** (streak - 1)
        if not health.warned:
            health.warned = True
            _warn(
                f"sink {sink.name!r} failed at step {step}: {exc!r}; training continues, the sink "
                f"is retried with backoff (1, 2, 4, ... steps) and disabled after "
                f"{self.max_failures} consecutive failures"
            )

    def finish(self, failed: bool = False) -> None:
        """Call ``finish(failed)`` on every active sink; failures are warned, not raised."""
        for sink in self._active():
            try:
                sink.finish(failed=failed)
            except Exception as exc:  # noqa: BLE001
                _warn(f"sink {sink.name!r} failed to finish: {exc!r}")


def _warn(text: str) -> None:
    warnings.warn(f"grpo-monitor: {text}", SinkWarning, stacklevel=3)
