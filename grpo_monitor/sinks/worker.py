"""One sink's delivery: the failure policy (backoff, disabling) and the thread that feeds it.

:func:`run_job` makes one call on a sink and keeps its :class:`SinkHealth`; it is used
inline for synchronous (durable) sinks and by a :class:`SinkWorker` for the others. Neither
raises warnings itself: they hand back the text, and the training thread warns (so
``warnings`` filters and ``pytest.warns`` see them where the user is).
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

from ..report import StepReport
from .base import Sink


@dataclasses.dataclass
class SinkHealth:
    """Bookkeeping of one sink: its failure streak, the steps left to skip, the reports dropped.

    ``dropped`` counts reports not handed to a blocked sink (its queue full, or its current
    call running past the stall timeout); ``blocked_warned`` says that was warned about.
    """

    name: str = "sink"  # the sink's attributes, read once (guarded) when the SinkSet is built
    synchronous: bool = False
    main_process_only: bool = True
    consecutive_failures: int = 0
    total_failures: int = 0
    skip_left: int = 0
    disabled: bool = False
    warned: bool = False
    last_error: BaseException | None = None
    dropped: int = 0
    blocked_warned: bool = False
    offered: int = 0  # reports handed to this sink (delivered or dropped)
    dropped_steps: tuple[int, int] | None = None  # the first and last step dropped

    def drop(self, step: int | None) -> None:
        """Count one report not handed to the blocked sink (``step``: its step, None for an alert)."""
        self.dropped += 1
        if step is not None:
            first = self.dropped_steps[0] if self.dropped_steps else step
            self.dropped_steps = (first, step)


@dataclasses.dataclass(frozen=True)
class Job:
    """One call to make on a sink: ``kind`` is "report", "config", "alert" or "finish"; ``what`` names it in
    warnings."""

    kind: str
    what: str
    call: Callable[[Sink], Any]
    failed: bool = False
    step: int | None = None

    @property
    def urgent(self) -> bool:
        """Whether backoff and a full queue are ignored: a run's last report, an alert, finish."""
        return self.kind != "report" or self.failed

    @classmethod
    def for_report(cls, report: StepReport) -> Job:
        """``log_report(report)``; urgent when the report ends a failed run."""
        return cls("report", f"step {report.step}", lambda sink: sink.log_report(report), bool(report.failed),
                   report.step)

    @classmethod
    def for_alert(cls, title: str, text: str, level: str) -> Job:
        """``alert(title, text, level)``."""
        return cls("alert", f"alert {title!r}", lambda sink: sink.alert(title, text, level))

    @classmethod
    def for_config(cls, params: dict[str, Any]) -> Job:
        """``log_config(params)``: the run's configuration, before its first report."""
        return cls("config", "the run config", lambda sink: sink.log_config(params))

    @classmethod
    def for_finish(cls, failed: bool) -> Job:
        """``finish(failed=failed)``; made on disabled sinks too."""
        return cls("finish", "finish", lambda sink: sink.finish(failed=failed), failed)


def run_job(sink: Sink, health: SinkHealth, job: Job, max_failures: int) -> str | None:
    """Make ``job``'s call on ``sink`` under the failure policy; the text to warn, if any."""
    if job.kind == "finish":
        try:
            job.call(sink)
        except Exception as exc:  # noqa: BLE001 - a sink must never stop training
            return f"sink {health.name!r} failed to finish: {said(exc)}"
        return None
    if job.kind == "config":  # once per run, not a record: outside the failure streak, not retried
        if health.disabled:
            return None
        try:
            job.call(sink)
        except Exception as exc:  # noqa: BLE001 - a sink must never stop training
            return f"sink {health.name!r} failed to store the run config ({said(exc)}); its reports go on without it"
        return None
    if health.disabled:
        return None
    if health.skip_left > 0 and not job.urgent:
        health.skip_left -= 1
        return None
    try:
        job.call(sink)
    except Exception as exc:  # noqa: BLE001 - a sink must never stop training
        return record_failure(sink, health, exc, job.what, max_failures)
    lost, health.consecutive_failures, health.skip_left = health.consecutive_failures, 0, 0
    texts = sink_notes(sink, health)
    if lost and health.synchronous:
        texts.insert(0, f"sink {health.name!r} recovered at {job.what} after {lost} failed writes (those records are "
                        "lost)")
    return "; ".join(texts) or None


def sink_notes(sink: Sink, health: SinkHealth) -> list[str]:
    """What the sink asked to say (:meth:`Sink.note`), each naming the sink; a user sink without the method, or
    one whose method raises, says nothing."""
    try:
        notes = list(getattr(sink, "take_notes", list)())
    except Exception:  # noqa: BLE001 - a sink must never stop training
        return []
    return [f"sink {health.name!r}: {text}" for text in notes]


def said(exc: BaseException) -> str:
    """An exception as a warning names it: its type and its text, which keeps an ``OSError``'s file name (its
    ``repr`` drops it).

    >>> said(FileNotFoundError(2, "No such file or directory", "/run/m.jsonl"))
    "FileNotFoundError: [Errno 2] No such file or directory: '/run/m.jsonl'"
    """
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def record_failure(sink: Sink, health: SinkHealth, exc: Exception, what: str, max_failures: int) -> str | None:
    """Count a failure; back off (non-durable sinks only) or disable; the text to warn, if any."""
    health.consecutive_failures += 1
    health.total_failures += 1
    health.last_error = exc
    streak = health.consecutive_failures
    durable = health.synchronous  # never disabled: each step is retried
    if streak >= max_failures and not durable:
        health.disabled = True
        return (
            f"sink {health.name!r} disabled after {streak} consecutive failures "
            f"(last at {what}: {said(exc)}); its output stops here"
        )
    if not durable:
        health.skip_left = 2 ** (streak - 1)
    if health.warned:
        return None
    health.warned = True
    retry = ("on every step and never disabled (a durable sink)" if durable
             else f"with backoff (1, 2, 4, ... steps) and disabled after {max_failures} consecutive failures")
    return f"sink {health.name!r} failed at {what}: {said(exc)}; training continues, the sink is retried {retry}"


_STOP = Job("stop", "stop", lambda sink: None)


class SinkWorker:
    """A FIFO of jobs for one sink, served in order by one daemon thread started on first use.

    The thread holds no reference to the :class:`~grpo_monitor.sinks.SinkSet`; warning
    texts go to ``messages``, a deque the training thread empties.
    """

    def __init__(self, sink: Sink, health: SinkHealth, max_failures: int, messages: collections.deque):
        self.sink = sink
        self.health = health
        self.max_failures = max_failures
        self.messages = messages
        self._jobs: collections.deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self._pending = 0  # jobs queued or running
        self._busy_since: float | None = None
        self._thread: threading.Thread | None = None

    def queued(self) -> int:
        """Jobs waiting (not counting the one running)."""
        return len(self._jobs)

    def pending(self) -> int:
        """Jobs queued or running."""
        return self._pending

    def busy_for(self) -> float:
        """Seconds the current call has been running (0 when idle)."""
        since = self._busy_since
        return 0.0 if since is None else time.monotonic() - since

    def put(self, job: Job) -> None:
        """Queue ``job`` behind the others; starts the thread on first use. Never blocks."""
        with self._cond:
            self._jobs.append(job)
            self._pending += 1
            self._cond.notify_all()
        if self._thread is None:
            name = f"grpo-monitor-sink-{self.health.name}"
            self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
            self._thread.start()

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until every queued job is done; whether it is."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, max(0.0, timeout))

    def wait_for_space(self, size: int, stalled: Callable[[], bool]) -> bool:
        """Wait until fewer than ``size`` jobs are queued; False (at once) while ``stalled()`` says the sink hangs."""
        with self._cond:
            while len(self._jobs) >= size:
                if stalled():
                    return False
                self._cond.wait(0.05)
        return True

    def stop(self) -> None:
        """End the thread once the jobs queued before this call are done."""
        if self._thread is not None:
            with self._cond:
                self._jobs.append(_STOP)
                self._cond.notify_all()

    def _take(self) -> Job:
        with self._cond:
            self._cond.wait_for(lambda: bool(self._jobs))
            return self._jobs.popleft()

    def _serve(self) -> None:
        while (job := self._take()) is not _STOP:
            self._busy_since = time.monotonic()
            try:
                text = run_job(self.sink, self.health, job, self.max_failures)
            except BaseException as exc:  # noqa: BLE001 - e.g. SystemExit from a sink: keep serving
                text = f"sink {self.health.name!r} raised {said(exc)} at {job.what}"
            finally:
                self._busy_since = None
            if text:
                self.messages.append(text)
            with self._cond:
                self._pending -= 1
                self._cond.notify_all()
