"""SinkSet queues: a slow or hung sink never stalls training; order, backoff and durability hold.

Timing bounds are generous on purpose (a loaded 2-core machine): each one is several
times below what the call would take if it waited on the sink.
"""

from __future__ import annotations

import gc
import random
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.sinks import JSONLSink, Sink, SinkSet, SinkWarning, read_jsonl
from references import advantages

ROOT = Path(__file__).resolve().parents[2]
R = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]])
ADV = advantages(R, "population", 1e-6)


class Slow(Sink):
    """Sleeps ``delay`` seconds (or until ``release`` is set) in every call; records what it got and from which
    thread."""

    def __init__(self, name="slow", delay=0.0, release: threading.Event | None = None, synchronous=False):
        self.name, self.delay, self.release, self.synchronous = name, delay, release, synchronous
        self.started = threading.Event()
        self.events: list[str] = []
        self.steps: list[int] = []
        self.threads: set[str] = set()

    def _wait(self):
        self.started.set()
        self.threads.add(threading.current_thread().name)
        if self.release is not None:
            self.release.wait()
        time.sleep(self.delay() if callable(self.delay) else self.delay)

    def log_report(self, report):
        self._wait()
        self.steps.append(report.step)
        self.events.append(f"report {report.step}")

    def alert(self, title, text, level="ERROR"):
        self.events.append(f"alert {title} {level}")

    def finish(self, failed=False):
        self.events.append(f"finish {failed}")


class Failing(Slow):
    """Raises OSError on the calls ``fails(n)`` selects (n counts from 1); records every attempt."""

    def __init__(self, fails, name="failing", synchronous=False):
        super().__init__(name, synchronous=synchronous)
        self.fails, self.attempts = fails, []

    def log_report(self, report):
        self.attempts.append(report.step)
        self.threads.add(threading.current_thread().name)
        if self.fails(len(self.attempts)):
            raise OSError(28, f"No space left on device at step {report.step}")
        super().log_report(report)


def _sink_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, SinkWarning)]


def _train(mon: GRPOMonitor, steps: int, after_step=lambda step: None) -> float:
    """Run ``steps`` monitored steps; the seconds they took in all."""
    start = time.monotonic()
    for step in range(steps):
        mon.observe_rollout(R, advantages=ADV)
        mon.end_step()
        after_step(step)
    return time.monotonic() - start


def _sink_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("grpo-monitor-sink-")}


def test_a_3s_sink_does_not_slow_end_step_and_gets_what_fit_in_its_queue(tmp_path):
    """Five end_steps next to a 3 s sink take well under 3 s; close() delivers what its one-slot queue took, in
    order."""
    slow = Slow("sleepy", delay=3.0)
    mon = GRPOMonitor(MonitorConfig(group_size=4), sinks=[slow, JSONLSink(tmp_path / "run.jsonl")])
    mon.sinks.queue_size, mon.sinks.flush_timeout = 1, 20.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        took = _train(mon, 5)
        mon.close()
    assert took < 1.5, f"5 end_steps took {took:.1f} s; waiting on the sink would take 15 s"
    dropped = mon.sinks.health_of(slow).dropped
    # one call running (3 s, longer than the 5 steps) + one queued: 1 or 2 accepted, the rest dropped
    assert 1 <= len(slow.steps) <= 2 and len(slow.steps) + dropped == 5
    assert slow.steps == sorted(slow.steps) and slow.steps[0] == 0
    assert slow.events[-1] == "finish False", "finish comes after every accepted report"
    blocked = [t for t in _sink_warnings(caught) if "'sleepy' is blocked" in t]
    assert len(blocked) == 1 and "queue of 1 reports is full" in blocked[0]


def test_every_report_arrives_by_close_when_the_timeout_allows(tmp_path):
    """A 0.2 s sink with room in its queue gets all 5 reports, then finish, when close() returns."""
    slow = Slow("slowish", delay=0.2)
    mon = GRPOMonitor(MonitorConfig(group_size=4), sinks=[slow])
    _train(mon, 5)
    mon.close()
    assert slow.events == [f"report {s}" for s in range(5)] + ["finish False"]
    assert mon.sinks.health_of(slow).dropped == 0


def test_a_sink_blocked_forever_never_stalls_training_or_close(tmp_path):
    """A sink waiting on an Event never set: end_step does not wait, JSONL is on disk at once, close() returns in
    its timeout and names it."""
    never = threading.Event()
    hung = Slow("hung", release=never)
    path = tmp_path / "run.jsonl"
    mon = GRPOMonitor(MonitorConfig(group_size=4), sinks=[hung, JSONLSink(path)])
    mon.sinks.flush_timeout = 1.0
    on_disk: list[int] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            took = _train(mon, 5, after_step=lambda step: on_disk.append(read_jsonl(path)[-1]["step"]))
            start = time.monotonic()
            mon.close()
            closing = time.monotonic() - start
    finally:
        never.set()  # free the daemon thread once the test has looked
    assert took < 1.5, f"5 end_steps took {took:.1f} s next to a hung sink"
    assert on_disk == [0, 1, 2, 3, 4], "the durable sink holds each step when end_step returns"
    assert 0.9 <= closing < 5.0, f"close() took {closing:.1f} s with flush_timeout=1"
    texts = [t for t in _sink_warnings(caught) if "'hung' did not drain within flush_timeout=1 s" in t]
    assert len(texts) == 1 and hung.steps == []


def test_a_call_running_past_stall_timeout_drops_reports(make_report):
    """Once the current call has run past stall_timeout, new reports are dropped (counted, warned once) although
    the queue has room."""
    release = threading.Event()
    hung = Slow("stuck", release=release)
    sinkset = SinkSet([hung], stall_timeout=0.3)
    sinkset.emit(make_report(0))
    assert hung.started.wait(10), "the sink's thread started"
    time.sleep(0.6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in (1, 2, 3):
            sinkset.emit(make_report(step))
    release.set()
    assert sinkset.flush(10)
    assert hung.steps == [0] and sinkset.health_of(hung).dropped == 3
    texts = _sink_warnings(caught)
    assert len(texts) == 1 and "'stuck' is blocked" in texts[0] and "stall_timeout=0.3 s" in texts[0]


def test_a_full_queue_drops_new_reports_but_not_the_failing_one(make_report):
    """Queue of 3 behind a hung call: steps 1-3 wait, 4-10 are dropped, the run's last (failed) report still gets in."""
    release = threading.Event()
    hung = Slow("full", release=release)
    sinkset = SinkSet([hung], queue_size=3)
    sinkset.emit(make_report(0))
    assert hung.started.wait(10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(1, 11):
            sinkset.emit(make_report(step))
        sinkset.emit(make_report(11, failed=True))
    release.set()
    assert sinkset.flush(10)
    assert hung.steps == [0, 1, 2, 3, 11]
    assert sinkset.health_of(hung).dropped == 7
    assert [t for t in _sink_warnings(caught) if "'full' is blocked" in t and "queue of 3 reports is full" in t]
    assert len(_sink_warnings(caught)) == 1


def test_each_sink_keeps_the_emitted_order_at_its_own_pace(make_report):
    """Two sinks with random per-call delays each get all 200 reports in emission order."""
    rng_a, rng_b = random.Random(1), random.Random(2)
    a = Slow("a", delay=lambda: rng_a.uniform(0, 0.002))
    b = Slow("b", delay=lambda: rng_b.uniform(0, 0.004))
    sinkset = SinkSet([a, b], queue_size=200)
    for step in range(200):
        sinkset.emit(make_report(step))
    assert sinkset.flush(30)
    assert a.steps == list(range(200)) and b.steps == list(range(200))
    assert a.threads == {"grpo-monitor-sink-a"} and b.threads == {"grpo-monitor-sink-b"}


def test_a_hung_sink_does_not_delay_another_and_flush_says_so(make_report):
    """With one sink hung, a second gets every report; flush(timeout) returns False after about its timeout."""
    release = threading.Event()
    hung, fast = Slow("hung", release=release), Slow("fast")
    sinkset = SinkSet([hung, fast])
    for step in range(5):
        sinkset.emit(make_report(step))
    start = time.monotonic()
    drained = sinkset.flush(timeout=0.5)
    waited = time.monotonic() - start
    deadline = time.monotonic() + 10
    while len(fast.steps) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    fast_steps, hung_steps = list(fast.steps), list(hung.steps)  # while the hung sink is still hung
    release.set()
    assert drained is False and 0.4 <= waited < 3.0
    assert fast_steps == list(range(5)) and hung_steps == []
    assert sinkset.flush(10) is True and hung.steps == list(range(5))


def test_backoff_runs_in_the_sinks_thread(make_report):
    """An always-failing sink is tried at steps 0, 2, 5, 10, 19 from its own thread, then disabled; warnings come
    in the caller's thread."""
    failing = Failing(lambda n: True)
    sinkset = SinkSet([failing], max_failures=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(40):
            sinkset.emit(make_report(step))
        assert sinkset.flush(10)
    assert failing.attempts == [0, 2, 5, 10, 19]
    assert failing.threads == {"grpo-monitor-sink-failing"}
    texts = _sink_warnings(caught)
    assert len(texts) == 2 and "'failing' failed at step 0" in texts[0] and "disabled after 5" in texts[1]


def test_a_durable_sink_is_retried_on_every_step(make_report):
    """A synchronous sink failing twice is tried on every step (no backoff skip), warned once and once on recovery."""
    durable = Failing(lambda n: n in (1, 2), name="durable", synchronous=True)
    sinkset = SinkSet([durable])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(5):
            sinkset.emit(make_report(step))
            assert durable.attempts[-1] == step, "called inline, before emit returns"
    assert durable.steps == [2, 3, 4]
    assert durable.threads == {threading.current_thread().name}
    health = sinkset.health_of(durable)
    assert health.total_failures == 2 and not health.disabled and health.skip_left == 0
    texts = _sink_warnings(caught)
    assert len(texts) == 2 and "'durable' failed at step 0" in texts[0] and "retried on every step" in texts[0]
    assert "'durable' recovered at step 2 after 2 failed writes" in texts[1]


def test_alert_reaches_every_active_sink_through_its_path(make_report):
    """alert() goes to an async and a synchronous sink, not to a disabled one nor to a rank-0 sink off rank 0."""
    queued, inline = Slow("queued"), Slow("inline", synchronous=True)
    dead = Failing(lambda n: True, name="dead")
    sinkset = SinkSet([queued, inline, dead], max_failures=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SinkWarning)
        sinkset.emit(make_report(0))
        assert sinkset.flush(10)
        sinkset.alert("grpo-monitor: part 'loss' disabled", "checks are off", level="WARN")
        assert sinkset.flush(10)
    expected = "alert grpo-monitor: part 'loss' disabled WARN"
    assert queued.events[-1] == expected and inline.events[-1] == expected
    assert all(not e.startswith("alert") for e in dead.events)
    off_rank = Slow("rank0", synchronous=True)
    SinkSet([off_rank], is_main_process=False).alert("t", "x")
    assert off_rank.events == []


def test_constructing_starts_no_thread_and_synchronous_sinks_never_do(tmp_path, make_report):
    """No thread at construction; emitting to synchronous sinks only starts none; an async sink gets one on first
    emit."""
    before = _sink_threads()
    inline = Slow("inline", synchronous=True)
    sync_only = SinkSet([inline, JSONLSink(tmp_path / "a.jsonl")])
    GRPOMonitor(MonitorConfig(group_size=4), sinks=[Slow("lazy")])
    sync_only.emit(make_report(0))
    sync_only.finish()
    assert not _sink_threads() - before
    lazy = Slow("lazy")
    mixed = SinkSet([lazy, inline])
    assert not _sink_threads() - before
    mixed.emit(make_report(1))
    assert {t.name for t in _sink_threads() - before} == {"grpo-monitor-sink-lazy"}
    mixed.finish()


def test_a_collected_sinkset_stops_its_threads(make_report):
    """Dropping the last reference to a SinkSet ends its sink threads (no leak across monitors)."""
    before = _sink_threads()
    sinkset = SinkSet([Slow("collected")])
    sinkset.emit(make_report(0))
    assert sinkset.flush(10)
    (thread,) = _sink_threads() - before
    del sinkset
    gc.collect()
    thread.join(10)
    assert not thread.is_alive()


def test_a_sinkset_is_reusable_after_finish(make_report):
    """After finish(), a new emit starts a fresh thread and is delivered (the monitor's reopen())."""
    sink = Slow("again")
    sinkset = SinkSet([sink])
    sinkset.emit(make_report(0))
    sinkset.finish()
    sinkset.emit(make_report(1))
    sinkset.finish()
    assert sink.events == ["report 0", "finish False", "report 1", "finish False"]


_EXIT_SCRIPT = textwrap.dedent(
    """
    import sys, threading, time
    from grpo_monitor.report import StepReport
    from grpo_monitor.sinks import Sink, SinkSet

    class FileSink(Sink):
        name = "file"
        def __init__(self, path, delay, hang):
            self.path, self.delay, self.hang = path, delay, hang
        def log_report(self, report):
            if self.hang:
                threading.Event().wait()
            time.sleep(self.delay)
            with open(self.path, "a") as f:
                f.write(f"{report.step}\\n")

    path, hang = sys.argv[1], sys.argv[2] == "hang"
    sinks = SinkSet([FileSink(path, 0.1, hang)], flush_timeout=1.0 if hang else 20.0)
    for step in range(5):
        sinks.emit(StepReport(step=step, metrics={"grpo/reward/mean": 0.5}))
    print("emitted", flush=True)  # exits here: neither finish() nor flush() is called
    """
)


@pytest.mark.parametrize("mode", ["slow", "hang"])
def test_queued_reports_are_flushed_at_interpreter_exit(tmp_path, mode):
    """A script that never closes still delivers its queued reports at exit; a hung sink delays exit by its
    flush_timeout only."""
    path = tmp_path / "steps.txt"
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT, str(path), mode], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    took = time.monotonic() - start
    assert out.returncode == 0 and out.stdout.strip() == "emitted", out.stderr
    if mode == "slow":
        assert path.read_text().split() == ["0", "1", "2", "3", "4"]
    else:
        assert not path.exists() and took < 30
        assert "'file' did not drain within flush_timeout=1 s" in out.stderr


@pytest.mark.parametrize(
    "kwargs",
    [{"queue_size": 0}, {"queue_size": 2.0}, {"stall_timeout": 0}, {"stall_timeout": "5"}, {"flush_timeout": -1.0}],
    ids=["queue-zero", "queue-float", "stall-zero", "stall-str", "flush-negative"],
)
def test_queue_settings_are_validated(kwargs):
    """queue_size must be an int >= 1 and the timeouts positive seconds; the error names the argument."""
    (name,) = kwargs
    with pytest.raises(ValueError, match=f"`{name}` to be"):
        SinkSet([], **kwargs)
