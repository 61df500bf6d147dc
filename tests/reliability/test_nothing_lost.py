"""Nothing logged is lost without a word: sink attributes, dropped reports, backpressure, exit, close, fork."""

from __future__ import annotations

import glob
import os
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
from grpo_monitor.catalog.metrics import DROPPED_REPORTS_KEY
from grpo_monitor.sinks import JSONLSink, Sink, SinkSet, SinkWarning, read_jsonl
from grpo_monitor.testing import RecordingSink
from references import advantages

ROOT = Path(__file__).resolve().parents[2]
R = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]])
ADV = advantages(R, "population", 1e-6)


def _steps(mon: GRPOMonitor, n: int) -> list:
    out = []
    for _ in range(n):
        mon.observe_rollout(R, advantages=ADV)
        out.append(mon.end_step())
    return out


class Gated(Sink):
    """A background sink that waits for ``gate`` in every call (a slow W&B), recording the steps it got."""

    name = "gated"

    def __init__(self, gate: threading.Event | None = None, delay: float = 0.0):
        self.gate, self.delay, self.steps = gate, delay, []

    def log_report(self, report):
        if self.gate is not None:
            self.gate.wait()
        time.sleep(self.delay)
        self.steps.append(report.step)


# ------------------------------------------------------------------ sink attributes
class RaisingAttribute(RecordingSink):
    """A sink whose ``name``, ``synchronous`` or ``main_process_only`` raises when read."""

    def __init__(self, attribute: str):
        super().__init__()
        self._bad = attribute

    def __getattribute__(self, item):
        if item == object.__getattribute__(self, "__dict__").get("_bad"):
            raise RuntimeError(f"{item} is broken")
        return object.__getattribute__(self, item)


@pytest.mark.parametrize("attribute", ["name", "synchronous", "main_process_only"])
def test_a_sink_attribute_that_raises_is_read_once_and_never_reaches_training(attribute):
    """The attribute is read once, guarded, at construction (one SinkWarning); training and the healthy sink go on."""
    bad, healthy = RaisingAttribute(attribute), RecordingSink()
    with pytest.warns(SinkWarning, match=f"RaisingAttribute.*{attribute}.*is broken"):
        mon = GRPOMonitor(MonitorConfig(on_violation="ignore"), sinks=[bad, healthy])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing more is warned, nothing raised, per step
        _steps(mon, 5)
    mon.close()
    assert [r.step for r in healthy.reports] == [0, 1, 2, 3, 4] and healthy.finished == [False]
    assert [r.step for r in bad.reports] == [0, 1, 2, 3, 4]  # the sink itself still works, under a fallback name


# ------------------------------------------------------------------ dropped reports
def _dropping_run(tmp_path: Path):
    """10 steps into a JSONL log and a sink blocked behind a queue of 2: (reports, log path, warnings at close)."""
    gate = threading.Event()
    slow, log = Gated(gate), tmp_path / "run.jsonl"
    mon = GRPOMonitor(MonitorConfig(on_violation="ignore", sink_queue_size=2), sinks=[slow, JSONLSink(log)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reports = _steps(mon, 10)
        gate.set()
        mon.close()
    texts = [str(w.message) for w in caught if issubclass(w.category, SinkWarning)]
    return reports, log, texts, 10 - len(slow.steps)


def test_a_sink_that_dropped_reports_says_how_many_at_close_and_in_the_log(tmp_path):
    """A blocked sink's dropped reports are counted in every later record (JSONL) and named at close()."""
    reports, log, texts, dropped = _dropping_run(tmp_path)
    assert dropped >= 6
    assert reports[-1].metrics[DROPPED_REPORTS_KEY] >= dropped - 1  # the last report counts the drops before it
    records = list(read_jsonl(log))
    assert [r["step"] for r in records] == list(range(10))  # the durable log has every step
    assert DROPPED_REPORTS_KEY not in records[0]["metrics"]
    assert records[-1]["metrics"][DROPPED_REPORTS_KEY] == reports[-1].metrics[DROPPED_REPORTS_KEY]
    assert any(f"sink 'gated' dropped {dropped} of 10 reports" in t for t in texts), texts


def test_the_report_and_the_demo_summary_say_reports_were_dropped(tmp_path):
    """report.html and the demo's closing text name the dropped reports (the W&B copy lacks steps)."""
    from grpo_monitor.tools.demo import DemoConfig
    from grpo_monitor.tools.demo.run import DemoResult
    from grpo_monitor.tools.demo.summary import summary_text
    from grpo_monitor.tools.reporting import build_report

    reports, log, _, _ = _dropping_run(tmp_path)
    count = int(reports[-1].metrics[DROPPED_REPORTS_KEY])
    html = build_report(log, tmp_path / "report").read_text()
    assert 'id="dropped"' in html and f"{count} step reports dropped" in html
    result = DemoResult(DemoConfig(), tmp_path, reports, [], None, None, 1.0, {"jsonl": str(log)})
    assert f"dropped {count} step reports" in summary_text(result)
    quiet = DemoResult(DemoConfig(), tmp_path, reports[:1], [], None, None, 1.0, {"jsonl": str(log)})
    assert "dropped" not in summary_text(quiet)


def test_backpressure_keeps_every_report_of_a_slow_sink():
    """With sink_when_full='block' (the demo, scan) a slow sink slows the loop instead of losing reports."""
    slow = Gated(delay=0.01)
    mon = GRPOMonitor(MonitorConfig(on_violation="ignore", sink_queue_size=2, sink_when_full="block"), sinks=[slow])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reports = _steps(mon, 30)
        mon.close()
    assert slow.steps == list(range(30)) and all(DROPPED_REPORTS_KEY not in r.metrics for r in reports)


def test_backpressure_never_waits_on_a_hung_sink():
    """A sink stuck past stall_timeout is blocked even under backpressure: its reports are dropped, counted."""
    gate = threading.Event()
    hung = Gated(gate)
    config = MonitorConfig(on_violation="ignore", sink_queue_size=1, sink_when_full="block", sink_stall_timeout=0.3,
                           sink_flush_timeout=0.5)
    mon = GRPOMonitor(config, sinks=[hung])
    start = time.monotonic()
    with pytest.warns(SinkWarning, match="blocked"):
        reports = _steps(mon, 8)
    assert time.monotonic() - start < 5.0
    assert reports[-1].metrics[DROPPED_REPORTS_KEY] >= 4
    gate.set()
    with pytest.warns(SinkWarning, match="dropped"):
        mon.close()


def test_sink_when_full_is_validated():
    """Only 'drop' and 'block' are taken, on the config and on a SinkSet."""
    with pytest.raises(ValueError, match="sink_when_full"):
        MonitorConfig(sink_when_full="wait")
    with pytest.raises(ValueError, match="when_full"):
        SinkSet([], when_full="wait")


# ------------------------------------------------------------------ close
def test_close_ends_a_step_observed_but_not_ended_and_names_it():
    """close() after observe_rollout without end_step: the step is ended (the sink gets it) and a warning names it."""
    sink = RecordingSink()
    mon = GRPOMonitor(MonitorConfig(on_violation="ignore"), sinks=[sink])
    _steps(mon, 2)
    mon.observe_rollout(R, advantages=ADV)
    with pytest.warns(RuntimeWarning, match="close\\(\\) ended step 2"):
        mon.close()
    assert [r.step for r in sink.reports] == [0, 1, 2] and sink.reports[2].metrics["grpo/groups/total"] == 2.0


def test_a_monitor_that_never_ended_a_step_says_so_at_close(tmp_path):
    """Forgetting end_step altogether: close() writes the data as step 0 and says end_step was never called."""
    log = tmp_path / "run.jsonl"
    mon = GRPOMonitor(MonitorConfig(on_violation="ignore"), sinks=[JSONLSink(log)])
    mon.observe_rollout(R, advantages=ADV)
    mon.observe_rollout(R, advantages=ADV)
    with pytest.warns(RuntimeWarning, match="end_step\\(\\) was never called"):
        mon.close()
    assert [r["step"] for r in read_jsonl(log)] == [0]


def test_an_idle_close_warns_about_nothing():
    """A monitor with no pending data closes quietly (no false alarm)."""
    mon = GRPOMonitor(MonitorConfig(on_violation="ignore"))
    _steps(mon, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mon.close()
        GRPOMonitor(MonitorConfig()).close()


def test_leaving_a_with_block_on_an_exception_names_the_unfinished_step():
    """An exception inside ``with monitor:`` leaves the step unfinished: a warning names it, the exception is kept."""
    sink = RecordingSink()
    with pytest.warns(RuntimeWarning, match="step 0 .*not ended"), pytest.raises(KeyError):
        with GRPOMonitor(MonitorConfig(on_violation="ignore"), sinks=[sink]) as mon:
            mon.observe_rollout(R, advantages=ADV)
            raise KeyError("the trainer's own error")
    assert sink.reports == [] and sink.finished == [True]


# ------------------------------------------------------------------ interpreter exit
EXIT_SCRIPT = textwrap.dedent("""
    import sys, torch, wandb
    from grpo_monitor import GRPOMonitor, MonitorConfig
    from grpo_monitor.sinks.wandb_sink import WandbSink
    sink = WandbSink(attach_to_active_run=False, mode="offline", dir=sys.argv[1], project="exit",
                     settings=wandb.Settings(console="off", silent=True))
    mon = GRPOMonitor(MonitorConfig(group_size=4, on_violation="ignore"), sinks=[sink])
    r = torch.tensor([[1., 0., 1., 0.], [0., 1., 1., 0.]])
    a = (r - r.mean(1, keepdim=True)) / r.std(1, correction=0, keepdim=True)
    for _ in range(30):
        mon.observe_rollout(r, advantages=a)
        mon.end_step()
    # no close(): the script just ends
""")


@pytest.mark.slow
@pytest.mark.skipif(__import__("importlib").util.find_spec("wandb") is None, reason="needs wandb")
def test_a_script_that_never_closes_keeps_every_step_in_its_offline_wandb_run(tmp_path):
    """30 steps, no close(): the offline W&B run, read back from its .wandb file, holds all 30 and ended cleanly."""
    from grpo_monitor.sinks.wandb_reader import exit_code, history_rows, read_wandb_records

    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path),
           "WANDB_CACHE_DIR": str(tmp_path / "cache"), "WANDB_CONFIG_DIR": str(tmp_path / "config"),
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "SinkWarning" not in done.stderr, done.stderr
    files = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "*.wandb"))
    assert len(files) == 1
    records = read_wandb_records(files[0])
    steps = sorted({int(row["grpo/step"]) for row in history_rows(records)})
    assert steps == list(range(30)) and exit_code(records) == 0


# ------------------------------------------------------------------ fork
class AppendingSink(Sink):
    """A background sink that appends ``<pid> <step>`` lines to a file (what a forked child sends is visible)."""

    name = "appending"

    def __init__(self, path: Path):
        self.path = path

    def log_report(self, report):
        with open(self.path, "a") as f:
            f.write(f"{os.getpid()} {report.step}\n")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_restarts_its_background_sinks(tmp_path):
    """After os.fork() the child's reports reach its background sink through a fresh thread; close() does not hang."""
    path = tmp_path / "lines.txt"
    mon = GRPOMonitor(MonitorConfig(on_violation="ignore", sink_flush_timeout=10.0), sinks=[AppendingSink(path)])
    _steps(mon, 2)
    assert mon.sinks.flush(5.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() in a process with threads
        pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            _steps(mon, 3)
            start = time.monotonic()
            mon.close()
            code = 0 if time.monotonic() - start < 5.0 else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    mon.close()
    lines = [line.split() for line in path.read_text().splitlines()]
    assert [int(s) for p, s in lines if int(p) == pid] == [2, 3, 4]
    assert [int(s) for p, s in lines if int(p) == os.getpid()] == [0, 1]
