"""The one wrapper around the monitor's public methods: one lock, the closed check, fail-open.

Every public call of :class:`~grpo_monitor.monitor.GRPOMonitor` runs under one re-entrant
lock, so threads sharing a monitor (async rollout workers) never interleave inside it: a
step is everything observed, from any thread, between two ``end_step`` calls. After
``close()`` (or the breach that closed the monitor) a call raises
:class:`MonitorClosedError` naming it. The monitor's own faults (anything but an input
error, an invariant breach or a closed monitor) are logged, switch the failing part off
and never stop training; a part switched off shows as ``grpo/monitor/disabled_parts`` and
as one alert through every sink. The integrations' own faults (``FailOpen`` in
``grpo_monitor.integrations._common``) are recorded here too, as the part
:func:`integration_part` names.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import torch

from ..catalog.metrics import DISABLED_PARTS_KEY, DROPPED_REPORTS_KEY, RETRIED_PARTS_KEY
from ..errors import MonitorClosedError as MonitorClosedError  # its home; this old path keeps working
from ..errors import RunStalled
from ..violations import InvariantViolation
from .calls import check_call
from .inputs import InputError

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("grpo_monitor")
#: Faults in a row (on consecutive tries, one try per step) before a part stays off for the run.
PART_FAULTS = 3
STEP_FAULTS = PART_FAULTS  # end_step failures in a row before it is switched off (its old name)
#: Parts whose switch-off turns invariant checks off (the others only lose metrics); an
#: integration's part (:func:`integration_part`) too, as it feeds the checked calls.
CHECKING_PARTS = ("rollout", "loss", "end_step")
_INTEGRATION = " integration"


def integration_part(name: str) -> str:
    """The part an integration's own faults switch off, as ``disabled_parts`` lists it.

    >>> integration_part("trl")
    'trl integration'
    """
    return name + _INTEGRATION


class Gate:
    """The small interface between a guarded object and this module: what the wrappers below need of it.

    ``lock`` (one re-entrant lock for every public call), ``closed_by`` (why it is closed; None: open),
    ``faults`` (the parts switched off, :class:`Faults`), and what the owner does about a fault:
    ``on_fault(owner, part)`` (drop what the part gathered this step, announce a switch-off) and
    ``on_skip(owner, part, *args, **kwargs)`` (what a switched-off call returns). The hooks are plain
    functions of the owner's class (no bound methods: the owner holds its gate, never the reverse).
    """

    def __init__(self, on_fault: Callable[[Any, str], None], on_skip: Callable[..., Any]):
        self.lock = threading.RLock()
        self.closed_by: str | None = None
        self.faults = Faults()
        self.on_fault, self.on_skip = on_fault, on_skip

    @property
    def closed(self) -> bool:
        return self.closed_by is not None


class Guarded(Protocol):
    """What the guard needs of the object it guards (:class:`~grpo_monitor.monitor.GRPOMonitor`): public names."""

    step: int
    gate: Gate
    config: Any


#: Exceptions that are the point of a call, never the monitor's own fault.
PROPAGATE = (InvariantViolation, RunStalled, InputError, MonitorClosedError)


def ensure_open(monitor: Guarded, call: str) -> None:
    """Raise :class:`MonitorClosedError` naming ``call`` when ``monitor`` is closed."""
    why = monitor.gate.closed_by
    if why is None:
        return
    raise MonitorClosedError(
        f"GRPOMonitor.{call}() called on a closed monitor ({why}); nothing was recorded. "
        "Build a new GRPOMonitor to keep monitoring, or call reopen() to start a new segment with the same sinks"
    )


def _lock_unless_tracing(monitor: Guarded) -> Any:
    """The monitor's lock; none while Dynamo traces a compiled caller (it cannot trace an RLock).

    Inside a ``torch.compile``d step the observe call's state updates are replayed after
    the graph runs, in the calling thread.
    """
    return contextlib.nullcontext() if torch.compiler.is_compiling() else monitor.gate.lock


def locked(fn: F) -> F:
    """Run ``fn`` under the monitor's lock, after the closed check."""

    @functools.wraps(fn)
    def wrapper(self: Guarded, *args: Any, **kwargs: Any) -> Any:
        with self.gate.lock:
            ensure_open(self, fn.__name__)
            check_call(fn, (self, *args), kwargs)
            return fn(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def fail_open(part: str) -> Callable[[F], F]:
    """:func:`locked`, and the monitor's own faults disable ``part`` instead of propagating.

    With ``config.strict`` every exception propagates (for tests). A failed ``end_step``
    still closes the step (the owner's ``Gate.on_fault`` and ``Gate.on_skip``).
    """

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Guarded, *args: Any, **kwargs: Any) -> Any:
            with _lock_unless_tracing(self):
                ensure_open(self, fn.__name__)
                if not torch.compiler.is_compiling():  # a call that does not bind is the caller's error
                    check_call(fn, (self, *args), kwargs)
                gate = self.gate
                if part in gate.faults.disabled and not gate.faults.retry(part, self.step):
                    return gate.on_skip(self, part, *args, **kwargs)
                try:
                    out = fn(self, *args, **kwargs)
                except PROPAGATE:
                    raise
                except Exception:
                    if self.config.strict:
                        raise
                    gate.on_fault(self, part)
                    return gate.on_skip(self, part, *args, **kwargs)
                gate.faults.succeeded(part)
                return out

        return wrapper  # type: ignore[return-value]

    return deco


def guarded_part(monitor: Guarded, part: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` as ``part`` inside a guarded call: a fault switches off only ``part`` (``None``
    returned; ``config.strict``: it propagates); an input error or a breach propagates. Off: ``None``."""
    if part in monitor.gate.faults.disabled:
        return None
    try:
        return fn(*args, **kwargs)
    except PROPAGATE:
        raise
    except Exception:
        if monitor.config.strict:
            raise
        monitor.gate.on_fault(monitor, part)
        return None


class Faults:
    """The monitor's own faults: the parts switched off, each part's streak, what was logged.

    A fault of ``"rollout"``, ``"generation"``, ``"loss"`` or an integration switches that
    part off for the rest of its step; its first call on a later step tries it again
    (:meth:`retry`, warned and counted in ``grpo/monitor/retried_parts``). ``"end_step"``
    is never off for a step (a transient fault skips that step only). A part faulting on
    ``PART_FAULTS`` tries in a row stays off for the run, announced once through the sinks.
    Report assembly faults never switch anything off: the step's checks already ran.
    """

    def __init__(self) -> None:
        self.disabled: set[str] = set()  # off now: for the rest of a step (``off_at``) or for the run
        self.streak: Counter[str] = Counter()  # internal faults in a row, per part
        self.off_at: dict[str, int] = {}  # parts off until a later step: the step of their fault
        self.retried: set[str] = set()  # parts tried again on the current step
        self.logged: set[str] = set()  # parts whose traceback was logged
        self.report_faults = 0

    def record(self, part: str, step: int, *, label: str | None = None) -> bool:
        """Log (the traceback once) and warn; True when ``part`` is switched off for the run by this fault.

        ``label`` names the part in the log and the warning (default: ``part``; an
        integration's part ``"trl integration"`` reads "the trl integration").
        """
        self.streak[part] += 1
        for_good = self.streak[part] >= PART_FAULTS
        if for_good:
            what = "this part is disabled for the rest of the run"
        elif part == "end_step":
            what = "this step is skipped"
        else:
            what = (f"this part is off for the rest of step {step} and retried at step {step + 1} "
                    f"(fault {self.streak[part]} of {PART_FAULTS} in a row before it stays off)")
        name = label or part
        if part not in self.logged:
            self.logged.add(part)
            log.exception("grpo-monitor: internal error in %s at step %d; %s, training goes on", name, step, what)
        else:
            log.error("grpo-monitor: internal error in %s at step %d again (%d in a row); %s", name, step,
                      self.streak[part], what)
        warnings.warn(f"grpo-monitor: internal error in {name}; {what} (at step {step}; see the log)",
                      RuntimeWarning, stacklevel=1)
        self.off_at.pop(part, None)
        if for_good:
            self.disabled.add(part)
        elif part != "end_step":
            self.disabled.add(part)
            self.off_at[part] = step
        return for_good

    def retry(self, part: str, step: int) -> bool:
        """Switch ``part`` back on if it was off for an earlier step only; True when it may run now (warned)."""
        faulted = self.off_at.get(part)
        if faulted is None or faulted >= step:
            return False
        del self.off_at[part]
        self.disabled.discard(part)
        self.retried.add(part)
        text = (f"grpo-monitor: retrying the '{part}' part at step {step}, off since its fault at step {faulted} "
                "(counted in grpo/monitor/retried_parts)")
        log.warning(text)
        warnings.warn(text, RuntimeWarning, stacklevel=1)
        return True

    def health(self, dropped: int) -> dict[str, float]:
        """The monitor's own health for every report: parts off, parts retried, reports the sinks ``dropped``."""
        out = {DISABLED_PARTS_KEY: float(len(self.disabled))}
        if self.retried:
            out[RETRIED_PARTS_KEY] = float(len(self.retried))
        if dropped:
            out[DROPPED_REPORTS_KEY] = float(dropped)
        return out

    def succeeded(self, part: str) -> None:
        """A call of ``part`` worked: its streak of faults in a row ends."""
        self.streak.pop(part, None)

    def announce(self, part: str, step: int, sinks: Any) -> None:
        """One alert through every sink when ``part`` is switched off (a metric shows it every step)."""
        checking = part in CHECKING_PARTS or part.endswith(_INTEGRATION)
        checks = "its invariant checks are OFF" if checking else "its metrics stop"
        text = (f"grpo-monitor switched off its '{part}' part after an internal error at step {step}; {checks} "
                "for the rest of the run. Training goes on. The traceback is in the 'grpo_monitor' log.")
        try:
            sinks.alert(f"grpo-monitor: part '{part}' disabled", text, level="WARN")
        except Exception:  # noqa: BLE001 - the announcement must not become a fault of its own
            log.exception("grpo-monitor: could not send the alert for the disabled part %s", part)

    def report_fault(self, step: int) -> None:
        """A step report could not be assembled: logged (traceback once), warned once, counted."""
        self.report_faults += 1
        if self.report_faults == 1:
            log.exception("grpo-monitor: internal error assembling the report of step %d; its metrics are "
                          "dropped, its checks ran, training goes on", step)
            warnings.warn("grpo-monitor: internal error assembling a step report; that step's metrics are "
                          "dropped, checks still run (see the log)", RuntimeWarning, stacklevel=1)
        else:
            log.error("grpo-monitor: internal error assembling the report of step %d (%d so far)",
                      step, self.report_faults)


class NotCopyable:
    """Refuses ``copy``, ``deepcopy`` and ``pickle``: a monitor owns open sinks that a copy would share."""

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(
            "GRPOMonitor cannot be pickled or copied: it owns open sinks (a JSONL file descriptor, a W&B run) that "
            "a copy would share. Carry its state instead: state = monitor.state_dict(); then "
            "GRPOMonitor(config, sinks).load_state_dict(state) in the other process"
        )

    def __deepcopy__(self, memo: Any) -> Any:
        return self.__reduce_ex__(None)

    def __copy__(self) -> Any:
        return self.__reduce_ex__(None)
