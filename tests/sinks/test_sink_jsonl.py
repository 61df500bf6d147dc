"""JSONLSink: one durable line per step, NaN/inf round-trip, torn lines skipped, kill -9 safe."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from grpo_monitor.sinks import JSONLSink, read_jsonl

ROOT = Path(__file__).resolve().parents[2]


def test_reports_round_trip_with_nan_and_inf(tmp_path, make_report, make_violation, same):
    """Each step is one line equal to report.to_dict(), non-finite floats included."""
    reports = [make_report(0), make_report(1, violations=[make_violation(1)], failed=True)]
    reports[0].metrics.update({"grpo/kl/k3_max": float("inf"), "grpo/adv/stabilizer": float("-inf"),
                               "grpo/ratio/mean": float("nan")})
    reports[0].histograms["grpo/adv/values"].append(float("nan"))
    sink = JSONLSink(tmp_path / "run" / "steps.jsonl")
    for report in reports:
        sink.log_report(report)
    sink.finish()
    text = (tmp_path / "run" / "steps.jsonl").read_text()
    assert text.count("\n") == 2 and "NaN" in text and "-Infinity" in text
    records = read_jsonl(tmp_path / "run" / "steps.jsonl")
    assert all(same(r.to_dict(), rec) for r, rec in zip(reports, records, strict=True))
    assert records[1]["violations"][0]["invariant"] == "zero_group_mean" and records[1]["failed"] is True


def test_construction_has_no_side_effects(tmp_path):
    """Constructing the sink creates no directory and no file."""
    JSONLSink(tmp_path / "a" / "b.jsonl")
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("fsync", [True, False], ids=["fsync", "no-fsync"])
def test_one_write_call_per_step(tmp_path, make_report, monkeypatch, fsync):
    """The whole line goes out in one os.write, followed by os.fsync only when asked."""
    calls = []
    real_write, real_fsync = os.write, os.fsync
    monkeypatch.setattr(os, "write", lambda fd, data: calls.append(("write", bytes(data))) or real_write(fd, data))
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(("fsync", None)) or real_fsync(fd))
    sink = JSONLSink(tmp_path / "s.jsonl", fsync=fsync)
    sink.log_report(make_report(0, hist_size=5000))
    expected = [("write", (tmp_path / "s.jsonl").read_bytes())] + ([("fsync", None)] if fsync else [])
    assert calls == expected
    monkeypatch.undo()
    sink.finish()


def test_torn_final_line_is_skipped_with_a_warning(tmp_path, make_report):
    """A half-written last line (a crash mid-write) is skipped; the complete steps are kept."""
    path = tmp_path / "s.jsonl"
    sink = JSONLSink(path)
    for step in range(3):
        sink.log_report(make_report(step))
    sink.finish()
    with open(path, "ab") as f:
        f.write(b'{"step": 3, "metrics": {"grpo/groups/to')
    with pytest.warns(RuntimeWarning, match="torn final line 4"):
        records = read_jsonl(path)
    assert [r["step"] for r in records] == [0, 1, 2]


def test_resume_after_a_torn_line_keeps_new_steps_readable(tmp_path, make_report):
    """Appending after a crash first ends the torn line, so the next step is its own line."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"step": 0}\n{"step": 1, "metr')
    sink = JSONLSink(path)
    sink.log_report(make_report(1))
    sink.finish()
    with pytest.warns(RuntimeWarning, match="unreadable line 2"):
        records = read_jsonl(path)
    assert [r["step"] for r in records] == [0, 1]


_CHILD = textwrap.dedent(
    """
    import sys
    from grpo_monitor.report import StepReport
    from grpo_monitor.sinks.jsonl import JSONLSink

    sink = JSONLSink(sys.argv[1], fsync=sys.argv[2] == "1")
    values = [i * 1e-3 for i in range(5000)]  # ~50 KB lines
    for step in range(100000):
        report = StepReport(step=step, metrics={"grpo/reward/mean": step * 0.5},
                            histograms={"grpo/adv/values": values})
        sink.log_report(report)
        print(step, flush=True)
    """
)


@pytest.mark.parametrize("seed", range(3), ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("fsync", [True, False], ids=["fsync", "no-fsync"])
def test_kill_9_loses_no_completed_step(tmp_path, seed, fsync):
    """A child killed by SIGKILL at a random moment keeps every step it reported as written."""
    path = tmp_path / "steps.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path), "1" if fsync else "0"],
        stdout=subprocess.PIPE, env=env, text=True,
    )
    first = child.stdout.readline()  # the child is writing from here on
    assert first.strip() == "0", "child failed to start"
    time.sleep(random.Random(seed).uniform(0.0, 0.4))
    child.send_signal(signal.SIGKILL)
    rest = child.stdout.read()  # not communicate(): it would skip what readline() buffered
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    reported = [0] + [int(line) for line in rest.split()]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = read_jsonl(path)  # never raises
    steps = [r["step"] for r in records]
    assert steps == list(range(len(steps))), "steps are complete and in order"
    assert set(reported) <= set(steps), "every reported step is in the file"
    assert len(steps) - len(reported) <= 1, "at most the step being printed is extra"
    assert all("torn final line" in str(w.message) for w in caught)
