"""JSONL after a transient write failure: a real partial write costs exactly the failed step.

A child process trains with a :class:`JSONLSink`; for one step it lowers its own
``RLIMIT_FSIZE`` (with ``SIGXFSZ`` ignored) just above the file's size, so the kernel
writes part of that step's line and then fails the rest with EFBIG: real torn bytes, as
a full disk leaves them. The limit is then raised back ("space is back").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from grpo_monitor.sinks.jsonl import read_jsonl

resource = pytest.importorskip("resource", reason="needs POSIX resource limits")
signal = pytest.importorskip("signal")
pytestmark = pytest.mark.skipif(
    not (hasattr(resource, "RLIMIT_FSIZE") and hasattr(signal, "SIGXFSZ")), reason="needs RLIMIT_FSIZE and SIGXFSZ"
)

ROOT = Path(__file__).resolve().parents[2]
STEPS = 8
CHILD = textwrap.dedent(
    """
    import json, os, resource, signal, sys, warnings
    from pathlib import Path
    import torch
    from grpo_monitor import GRPOMonitor, MonitorConfig
    from grpo_monitor.sinks import SinkWarning
    from grpo_monitor.sinks.jsonl import JSONLSink, read_jsonl

    path, fail_step, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    rewards = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]])
    adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, correction=0, keepdim=True) + 1e-6)
    sink = JSONLSink(path)
    mon = GRPOMonitor(MonitorConfig(group_size=4), sinks=[sink])
    out = {"last_on_disk": []}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(steps):
            if step == fail_step:
                out["size_before"] = size = os.path.getsize(path) if os.path.exists(path) else 0
                resource.setrlimit(resource.RLIMIT_FSIZE, (size + 40, hard))  # room for 40 bytes of the line
            mon.observe_rollout(rewards, advantages=adv)
            mon.end_step()
            if step == fail_step:
                data = Path(path).read_bytes()
                out["size_after"], out["ends_in_newline"] = len(data), data.endswith(b"\\n")
                resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space is back
            records = read_jsonl(path)
            out["last_on_disk"].append(records[-1]["step"] if records else None)
        health = mon.sinks.health_of(sink)
        out["failures"], out["disabled"] = health.total_failures, health.disabled
        mon.close()
    out["warnings"] = [str(w.message) for w in caught if issubclass(w.category, SinkWarning)]
    print(json.dumps(out))
    """
)


def _run_child(path: Path, fail_step: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), str(fail_step), str(STEPS)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("fail_step", [0, 3], ids=["first-step", "mid-run"])
def test_a_partial_write_loses_only_the_failed_step(tmp_path, fail_step):
    """EFBIG mid-line at one step: the next step is written and readable, every line parses strictly, only the
    failed step is missing."""
    path = tmp_path / "run.jsonl"
    out = _run_child(path, fail_step)
    # the failure was real and partial: 40 bytes of the line were written, with no newline
    assert out["size_after"] == out["size_before"] + 40 and not out["ends_in_newline"]
    expected = [s for s in range(STEPS) if s != fail_step]
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"", "the file ends with a complete line"
    assert [json.loads(line)["step"] for line in lines[:-1]] == expected, "every line is valid JSON"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # read_jsonl warns on any torn or unreadable line
        assert [r["step"] for r in read_jsonl(path)] == expected
    # durable on return: the step after the failure is on disk when its end_step returns
    before = [fail_step - 1] if fail_step > 0 else [None]
    assert out["last_on_disk"][fail_step:fail_step + 2] == before + [fail_step + 1]
    assert out["failures"] == 1 and not out["disabled"]
    assert len(out["warnings"]) == 2
    assert "recovered" in out["warnings"][1] and "after 1 failed writes" in out["warnings"][1]
    assert "'jsonl' failed at step" in out["warnings"][0] and "File too large" in out["warnings"][0]
    assert "retried on every step" in out["warnings"][0]


def test_a_failed_write_is_cut_back_even_after_a_reopen(tmp_path):
    """Torn bytes of a failed write are cut when the sink reopens the file after finish(), not ended by a newline."""
    path = tmp_path / "run.jsonl"
    path.write_text('{"step": 0}\n')
    code = textwrap.dedent(
        """
        import resource, signal, sys
        from grpo_monitor.sinks.jsonl import JSONLSink
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        path, size = sys.argv[1], int(sys.argv[2])
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 25, hard))
        sink = JSONLSink(path)
        try:
            sink.write_record({"step": 1, "pad": "x" * 200})
        except OSError as exc:
            print("failed", exc.errno)
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        sink.finish()
        sink.write_record({"step": 2})
        sink.finish()
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code, str(path), str(path.stat().st_size)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.split() == ["failed", "27"], proc.stdout + proc.stderr
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [0, 2]
