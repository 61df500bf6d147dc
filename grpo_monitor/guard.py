"""The one wrapper around the monitor's public methods: one lock, the closed check, fail-open.

Every public call of :class:`~grpo_monitor.monitor.GRPOMonitor` runs under one re-entrant
lock, so threads sharing a monitor (async rollout workers) never interleave inside it: a
step is everything observed, from any thread, between two ``end_step`` calls. After
``close()`` (or the breach that closed the monitor) a call raises
:class:`MonitorClosedError` naming it. The monitor's own faults (anything but an input
error, an invariant breach or a closed monitor) are logged, switch the failing part off
and never stop training; a part switched off shows as ``grpo/monitor/disabled_parts`` and
as one alert through every sink.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from .inputs import InputError
from .violations import InvariantViolation

if TYPE_CHECKING:
    from .monitor import GRPOMonitor

F = TypeVar("F", bound=Callable[..., Any])


class MonitorClosedError(RuntimeError):
    """A public method was called on a closed monitor."""


#: Exceptions that are the point of a call, never the monitor's own fault.
PROPAGATE = (InvariantViolation, InputError, MonitorClosedError)


def ensure_open(monitor: GRPOMonitor, call: str) -> None:
    """Raise :class:`MonitorClosedError` naming ``call`` when ``monitor`` is closed."""
    if not monitor.closed:
        return
    why = monitor._closed_by or "close() was called"
    raise MonitorClosedError(
        f"GRPOMonitor.{call}() called on a closed monitor ({why}); nothing was recorded. "
        "Build a new GRPOMonitor to keep monitoring, or call reopen() to start a new segment with the same sinks"
    )


def locked(fn: F) -> F:
    """Run ``fn`` under the monitor's lock, after the closed check."""

    @functools.wraps(fn)
    def wrapper(self: GRPOMonitor, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            ensure_open(self, fn.__name__)
            return fn(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def fail_open(part: str) -> Callable[[F], F]:
    """:func:`locked`, and the monitor's own faults disable ``part`` instead of propagating.

    With ``config.strict`` every exception propagates (for tests). A failed ``end_step``
    still closes the step; see ``GRPOMonitor._fault``.
    """

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: GRPOMonitor, *args: Any, **kwargs: Any) -> Any:
            with self._lock:
                ensure_open(self, fn.__name__)
                if part in self._disabled:
                    return self._skip(part, *args, **kwargs)
                try:
                    out = fn(self, *args, **kwargs)
                except PROPAGATE:
                    raise
                except Exception:
                    if self.config.strict:
                        raise
                    self._fault(part)
                    return self._skip(part, *args, **kwargs)
                self._faults.pop(part, None)
                return out

        return wrapper  # type: ignore[return-value]

    return deco
