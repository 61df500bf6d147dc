"""Hands each report to every sink, isolating their failures and their slowness from training."""

from __future__ import annotations

import atexit
import collections
import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from ..report import StepReport
from .base import Sink
from .worker import Job, SinkHealth, SinkWorker, run_job

__all__ = ["WHEN_FULL", "SinkHealth", "SinkSet", "SinkWarning"]

#: Seconds ``close()`` waits at most for a background sink still opening its backend (W&B's own init_timeout is 90).
OPEN_TIMEOUT = 120.0
#: What a background sink's full queue does to a new report: drop it (counted, warned) or wait for room.
WHEN_FULL = ("drop", "block")


class SinkWarning(RuntimeWarning):
    """A sink failed or blocked; training goes on."""


class SinkSet:
    """The monitor's view of its sinks: ``emit(report)``, ``alert(...)``, ``flush()``, ``finish(failed)``.

    Synchronous sinks (``sink.synchronous``, e.g. JSONL) are called inline, so a step is on
    disk when ``emit`` returns. Every other sink gets its own daemon thread, fed in order
    from a queue of at most ``queue_size`` reports, so a slow backend never delays
    ``end_step`` nor the other sinks. A sink whose queue is full, or whose current call has
    run longer than ``stall_timeout`` seconds, is blocked: the report is dropped (counted in
    ``health_of(sink).dropped``) and a :class:`SinkWarning` names the sink once. A run's last
    (failed) report, alerts and ``finish`` are queued even then.

    A sink that raises never stops training or the other sinks. Its first failure is
    warned once, naming the sink and the exception; after the k-th consecutive failure a
    non-synchronous sink skips the next 2**(k-1) reports (1, 2, 4, ...), while a
    synchronous (durable) one is retried on every step; after ``max_failures`` consecutive
    failures it is disabled, with a final warning. A success resets the streak. A failed
    report goes to sinks that are backing off too. Warnings are raised in the training
    thread, at the next call of this object.

    ``finish()`` queues each sink's ``finish`` behind its reports (disabled sinks included)
    and waits at most ``flush_timeout`` seconds in all for them, then warns about any sink
    that did not drain and returns; that sink's ``finish`` stays queued behind its blocked
    call (never made from the training thread, concurrently with it). At interpreter exit,
    queued reports are flushed (same bound) even when ``finish`` is never called. Threads
    start on first use, never here.

    Sinks with ``main_process_only`` are skipped when ``is_main_process`` is false;
    ``is_main_process`` may be a bool or a no-argument callable, checked at call time.
    ``queue_size``, ``stall_timeout`` and ``flush_timeout`` are read at each call and may be
    changed on the object.

    Before a sink's first call of a run (and again after ``finish``), ``sink.capture()`` runs
    in the calling (training) thread, and the first ``emit`` given ``config`` hands each sink
    ``log_config(config())`` ahead of the report: the run's configuration, once per run.
    """

    def __init__(
        self,
        sinks: Iterable[Sink],
        *,
        is_main_process: bool | Callable[[], bool] = True,
        max_failures: int = 5,
        queue_size: int = 100,
        stall_timeout: float = 30.0,
        flush_timeout: float = 20.0,
        when_full: str = "drop",
    ):
        _check_int("max_failures", max_failures)
        _check_int("queue_size", queue_size)
        _check_seconds("stall_timeout", stall_timeout)
        _check_seconds("flush_timeout", flush_timeout)
        if when_full not in WHEN_FULL:
            raise ValueError(f"Expected argument `when_full` to be one of {', '.join(WHEN_FULL)} but got {when_full!r}")
        self.sinks = list(sinks)
        self.is_main_process = is_main_process
        self.max_failures = max_failures
        self.queue_size = queue_size
        self.stall_timeout = float(stall_timeout)
        self.flush_timeout = float(flush_timeout)
        self.when_full = when_full
        self._messages: collections.deque[str] = collections.deque()
        self._captured: set[int] = set()  # sinks whose capture() ran this run
        self._configured = False
        self.health: dict[int, SinkHealth] = {id(s): self._read_attributes(s) for s in self.sinks}
        self._workers: dict[int, SinkWorker] = {}
        self._pid = os.getpid()
        self._report()  # a sink attribute that raised is warned about here, at construction

    # ------------------------------------------------------------------ views
    def _read_attributes(self, sink: Sink) -> SinkHealth:
        """A sink's ``name``, ``synchronous`` and ``main_process_only``, read once; a raising one gets its default."""
        health = SinkHealth(name=type(sink).__name__)
        for attribute, cast in (("name", str), ("synchronous", bool), ("main_process_only", bool)):
            try:
                setattr(health, attribute, cast(getattr(sink, attribute, getattr(health, attribute))))
            except Exception as exc:  # noqa: BLE001 - a broken sink attribute must never reach training
                self._note(f"sink {type(sink).__name__} (named {health.name!r}): reading its `{attribute}` raised "
                           f"{exc!r}; using {getattr(health, attribute)!r} for it")
        return health

    def _main(self) -> bool:
        main = self.is_main_process
        return bool(main() if callable(main) else main)

    def _active(self) -> list[Sink]:
        main = self._main()
        return [s for s in self.sinks if main or not self.health_of(s).main_process_only]

    def dropped(self) -> int:
        """Reports dropped so far by every sink (blocked background sinks), 0 on a healthy run."""
        return sum(h.dropped for h in self.health.values())

    def health_of(self, sink: Sink) -> SinkHealth:
        """The bookkeeping (attributes, failures, dropped reports) of ``sink`` (one of :attr:`sinks`)."""
        health = self.health.get(id(sink))
        if health is None:
            health = self.health[id(sink)] = self._read_attributes(sink)
        return health

    # ------------------------------------------------------------------ calls
    def emit(self, report: StepReport, config: Callable[[], dict[str, Any]] | None = None) -> None:
        """Hand ``report`` to every active sink that is not disabled; never waits on a slow one.

        ``config`` (the run parameters, built only when needed) goes first, once per run."""
        if config is not None and not self._configured:
            self._configured = True
            self._dispatch(Job.for_config(config()), report=False)
        self._dispatch(Job.for_report(report))

    def alert(self, title: str, text: str, level: str = "ERROR") -> None:
        """Raise an alert in every active sink (e.g. a monitor part was disabled); never waits."""
        self._dispatch(Job.for_alert(title, text, level))

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the queued work is done, at most ``timeout`` s (default ``flush_timeout``); True if drained."""
        return self._drain(self.flush_timeout if timeout is None else timeout, warn=False)

    def finish(self, failed: bool = False) -> None:
        """Flush, then call ``finish(failed)`` on every active sink, all within ``flush_timeout`` s; never raises."""
        self._wait_opening()
        deadline = time.monotonic() + self.flush_timeout
        self._dispatch(Job.for_finish(failed), report=False)
        self._wait(deadline, warn=True)
        self._note_dropped()
        self._report()
        _stop_all(self._workers)
        self._workers.clear()  # a later emit starts fresh threads
        self._captured.clear()
        self._configured = False

    # --------------------------------------------------------------- delivery
    def _dispatch(self, job: Job, report: bool = True) -> None:
        self._report()
        for sink in self._active():
            self._deliver(sink, job)
        if report:
            self._report()

    def _deliver(self, sink: Sink, job: Job) -> None:
        health = self.health_of(sink)
        if health.disabled and job.kind != "finish":
            return
        if id(sink) not in self._captured and job.kind != "finish":
            self._capture(sink, health.name)
        if health.synchronous:
            self._note(run_job(sink, health, job, self.max_failures))
            return
        worker = self._worker(sink)
        if job.kind == "report":
            health.offered += 1
        if not job.urgent and self.when_full == "block":  # backpressure: wait for room unless the sink hangs
            worker.wait_for_space(self.queue_size, lambda: worker.busy_for() > self.stall_timeout)
        blocked = None if job.urgent else self._blocked(worker)
        if blocked is None:
            worker.put(job)
            return
        health.drop(job.step)
        if not health.blocked_warned:
            health.blocked_warned = True
            self._note(
                f"sink {health.name!r} is blocked ({blocked}); {job.what} and later reports are "
                f"dropped while it stays blocked (counted in its health), training does not wait for it"
            )

    def _capture(self, sink: Sink, name: str) -> None:
        """``sink.capture()`` in this thread, once per run; a failure is warned and the sink used anyway."""
        self._captured.add(id(sink))
        try:
            sink.capture()
        except Exception as exc:  # noqa: BLE001 - a sink must never stop training
            self._note(f"sink {name!r} failed to find the trainer's run ({exc!r}); it opens its own")

    def _note_dropped(self) -> None:
        """At finish: say, per sink, how many reports it dropped and which steps it lacks."""
        for health in self.health.values():
            if health.dropped:
                first, last = health.dropped_steps or (None, None)
                steps = f" (between steps {first} and {last})" if first is not None else ""
                self._note(f"sink {health.name!r} dropped {health.dropped} of {health.offered} reports while it "
                           f"was blocked{steps}; those steps are missing from it (the JSONL log, if any, has them)")

    def _blocked(self, worker: SinkWorker) -> str | None:
        """Why ``worker`` takes no more reports now, or None."""
        busy = worker.busy_for()
        if busy > self.stall_timeout:
            return f"its current call has run for {busy:.1f} s, over stall_timeout={self.stall_timeout:g} s"
        if worker.queued() >= self.queue_size:
            return f"its queue of {self.queue_size} reports is full"
        return None

    def _worker(self, sink: Sink) -> SinkWorker:
        if self._pid != os.getpid():  # a forked child: the parent's threads do not exist here
            self._restart_after_fork()
        worker = self._workers.get(id(sink))
        if worker is None:
            worker = SinkWorker(sink, self.health_of(sink), self.max_failures, self._messages)
            if self not in _LIVE:
                _watch(self)
            self._workers[id(sink)] = worker
        return worker

    def _restart_after_fork(self) -> None:
        """In a forked child: forget the parent's workers (their threads and queued reports stay the parent's);
        the next report starts fresh threads here."""
        self._pid = os.getpid()
        self._workers.clear()

    # ---------------------------------------------------------------- waiting
    def _drain(self, timeout: float, warn: bool) -> bool:
        drained = self._wait(time.monotonic() + max(0.0, float(timeout)), warn)
        self._report()
        return drained

    def _wait_opening(self) -> None:
        """Wait, up to :data:`OPEN_TIMEOUT` s, while a background sink with queued work is still opening its
        backend (:meth:`Sink.opening`: ``wandb.init`` on a loaded node), so the flush clock measures the writes."""
        end = time.monotonic() + OPEN_TIMEOUT
        while time.monotonic() < end and any(w.pending() and _opening(w.sink) for w in self._workers.values()):
            time.sleep(0.05)

    def _wait(self, deadline: float, warn: bool) -> bool:
        """Wait for every worker until ``deadline``; note the ones that did not drain."""
        if self._pid != os.getpid():  # a forked child never waits on the parent's threads
            self._restart_after_fork()
        drained = True
        for worker in list(self._workers.values()):
            if worker.wait_idle(deadline - time.monotonic()):
                continue
            drained = False
            if warn:
                self._note(
                    f"sink {worker.health.name!r} did not drain within flush_timeout={self.flush_timeout:g} s "
                    f"({worker.pending()} calls abandoned, the current one running for "
                    f"{worker.busy_for():.1f} s); not waiting for it"
                )
        return drained

    def _note(self, text: str | None) -> None:
        if text:
            self._messages.append(text)

    def _report(self) -> None:
        """Warn, in the calling thread, about what the sinks' threads noted since the last call."""
        while self._messages:
            try:
                text = self._messages.popleft()
            except IndexError:  # pragma: no cover - emptied concurrently
                return
            warnings.warn(f"grpo-monitor: {text}", SinkWarning, stacklevel=4)


def _opening(sink: Sink) -> bool:
    try:
        return bool(sink.opening())
    except Exception:  # noqa: BLE001 - a user sink's method that raises (or is missing) means open
        return False


def _check_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"Expected argument `{name}` to be an int >= 1 but got {value!r}")


def _check_seconds(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"Expected argument `{name}` to be a number of seconds > 0 but got {value!r}")


# ------------------------------------------------------------ process lifetime
_LIVE: weakref.WeakSet[SinkSet] = weakref.WeakSet()
_HOOKED = False


def _watch(sinkset: SinkSet) -> None:
    """On a SinkSet's first worker: flush it at interpreter exit, stop its threads when it is collected."""
    global _HOOKED
    _LIVE.add(sinkset)
    weakref.finalize(sinkset, _stop_all, sinkset._workers).atexit = False  # the dict, never rebound
    if not _HOOKED:
        _HOOKED = True
        # Before the atexit hooks (threading's shutdown runs first): W&B's own hook tears its service down.
        try:
            threading._register_atexit(_flush_at_exit)  # type: ignore[attr-defined]
        except (AttributeError, RuntimeError):  # another Python, or already shutting down
            atexit.register(_flush_at_exit)


def _stop_all(workers: dict[int, SinkWorker]) -> None:
    for worker in list(workers.values()):
        worker.stop()


def _flush_at_exit() -> None:
    """At interpreter exit, before the atexit hooks: each SinkSet with background sinks never finished is
    finished (queued reports delivered, then ``finish``), within its flush_timeout."""
    for sinkset in list(_LIVE):
        if sinkset._workers and sinkset._pid == os.getpid():
            sinkset.finish(failed=False)
