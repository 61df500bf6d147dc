"""SinkSet: failing sinks are isolated, backed off, disabled; finish reaches every sink."""

from __future__ import annotations

import warnings

import pytest

from grpo_monitor.sinks import Sink, SinkSet, SinkWarning


class Recorder(Sink):
    """Records the steps it received and whether it was finished."""

    def __init__(self, name="recorder", main_process_only=True):
        self.name = name
        self.main_process_only = main_process_only
        self.steps: list[int] = []
        self.finished: list[bool] = []

    def log_report(self, report):
        self.steps.append(report.step)

    def finish(self, failed=False):
        self.finished.append(failed)


class Flaky(Recorder):
    """Raises OSError on the calls ``fails(call_number)`` selects; records every attempt."""

    def __init__(self, fails, name="flaky"):
        super().__init__(name)
        self.fails = fails
        self.attempts: list[int] = []

    def log_report(self, report):
        self.attempts.append(report.step)
        if self.fails(len(self.attempts)):
            raise OSError(f"disk full at step {report.step}")
        super().log_report(report)

    def finish(self, failed=False):
        super().finish(failed)
        raise OSError("cannot close")


def _emit(sinkset, make_report, steps):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in steps:
            sinkset.emit(make_report(step))
        assert sinkset.flush(), "the sinks' threads drain"  # non-synchronous sinks run in threads
    return [w for w in caught if issubclass(w.category, SinkWarning)]


def test_always_failing_sink_backs_off_then_is_disabled(make_report):
    """A sink failing on every call is retried after 1, 2, 4, 8 skipped steps, then disabled."""
    flaky, good = Flaky(lambda n: True), Recorder("good")
    sinkset = SinkSet([flaky, good], max_failures=5)
    caught = _emit(sinkset, make_report, range(40))
    assert flaky.attempts == [0, 2, 5, 10, 19]
    assert good.steps == list(range(40))
    assert sinkset.health_of(flaky).disabled
    assert len(caught) == 2
    first, final = (str(w.message) for w in caught)
    assert "'flaky'" in first and "OSError" in first and "disk full at step 0" in first
    assert "'flaky'" in final and "disabled after 5 consecutive failures" in final


def test_sink_failing_every_other_call_keeps_running(make_report):
    """A sink failing on every other call is never disabled: each success resets its backoff."""
    flaky, good = Flaky(lambda n: n % 2 == 1), Recorder("good")
    sinkset = SinkSet([flaky, good])
    caught = _emit(sinkset, make_report, range(12))
    # fail (skip 1), success, fail (skip 1), success, ...
    assert flaky.attempts == [0, 2, 3, 5, 6, 8, 9, 11]
    assert flaky.steps == [2, 5, 8, 11]
    assert good.steps == list(range(12))
    assert not sinkset.health_of(flaky).disabled
    assert sinkset.health_of(flaky).total_failures == 4
    assert len(caught) == 1, "a failing sink is reported once"


def test_failing_report_reaches_a_sink_in_backoff(make_report):
    """The run's last (failed) report is attempted even on a sink that is backing off."""
    flaky = Flaky(lambda n: n == 1)
    sinkset = SinkSet([flaky])
    _emit(sinkset, make_report, [0])
    sinkset.emit(make_report(1, failed=True))
    assert sinkset.flush()
    assert flaky.steps == [1]


def test_finish_reaches_every_sink_even_when_one_raises(make_report):
    """finish() is called on every sink, disabled ones included, and warns on failure."""
    flaky, good = Flaky(lambda n: True), Recorder("good")
    sinkset = SinkSet([flaky, good], max_failures=1)
    _emit(sinkset, make_report, range(3))
    assert sinkset.health_of(flaky).disabled
    with pytest.warns(SinkWarning, match="'flaky' failed to finish"):
        sinkset.finish(failed=True)
    assert flaky.finished == [True] and good.finished == [True]


@pytest.mark.parametrize("main", [False, lambda: False], ids=["bool", "callable"])
def test_main_process_only_sinks_are_skipped_off_rank_zero(make_report, main):
    """Off the main process only sinks with main_process_only=False write (and finish)."""
    rank0_only, everywhere = Recorder("rank0"), Recorder("all", main_process_only=False)
    sinkset = SinkSet([rank0_only, everywhere], is_main_process=main)
    sinkset.emit(make_report(0))
    sinkset.finish()
    assert rank0_only.steps == [] and rank0_only.finished == []
    assert everywhere.steps == [0] and everywhere.finished == [False]


def test_is_main_process_callable_is_checked_at_call_time(make_report):
    """A callable is evaluated on every emit, so a late distributed init is honoured."""
    state = {"main": False}
    sink = Recorder()
    sinkset = SinkSet([sink], is_main_process=lambda: state["main"])
    sinkset.emit(make_report(0))
    state["main"] = True
    sinkset.emit(make_report(1))
    assert sinkset.flush()
    assert sink.steps == [1]


@pytest.mark.parametrize("bad", [0, -1, 2.5], ids=["zero", "negative", "float"])
def test_max_failures_is_validated(bad):
    """max_failures must be a positive int; the error names the argument."""
    with pytest.raises(ValueError, match="`max_failures` to be an int >= 1"):
        SinkSet([], max_failures=bad)
