"""Crash safety: ``kill -9`` of a training process loses no step whose ``end_step()`` returned.

A real child process trains with a :class:`JSONLSink` and prints each step number after
``end_step`` returns; the parent kills it with SIGKILL at a random moment, restarts it on
the same file, and kills it again. The log must stay readable and hold every printed step.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

from grpo_monitor.sinks.jsonl import read_jsonl

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")

ROUNDS = 4  # kills per test, each on the file the previous round left behind
CHILD = textwrap.dedent(
    """
    import sys
    import torch
    from grpo_monitor import GRPOMonitor, MonitorConfig
    from grpo_monitor.sinks.jsonl import JSONLSink

    path, start = sys.argv[1], int(sys.argv[2])
    gen = torch.Generator().manual_seed(start)
    mon = GRPOMonitor(MonitorConfig(on_violation="ignore", table_every=3), sinks=[JSONLSink(path)])
    questions = [f"q{i}" for i in range(16)]
    print("ready", flush=True)
    step = start
    while True:
        rewards = (torch.rand(16, 8, generator=gen) < 0.4).float()
        adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-6)
        mon.observe_generation(rewards, question_ids=questions)
        mon.observe_rollout(rewards, advantages=adv, question_ids=questions)
        mon.end_step(step)
        print(step, flush=True)
        step += 1
    """
)


def _run_and_kill(script: str, path: str, start: int, delay: float) -> list[int]:
    """Start the child, let it train for ``delay`` seconds after its first step, SIGKILL it; the steps it printed."""
    proc = subprocess.Popen([sys.executable, script, path, str(start)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"ready", proc.stderr.read().decode()
        first = proc.stdout.readline()  # one completed step: the kill lands mid-training, however slow start-up was
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        out = first + out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, err.decode()
    return [int(line) for line in out.split()]


@pytest.mark.timeout(180)
def test_sigkill_at_a_random_moment_loses_no_returned_step(tmp_path):
    """Four SIGKILLs at random moments, restarting on the same file: every printed step is in the log."""
    script = tmp_path / "train.py"
    script.write_text(CHILD)
    path = str(tmp_path / "run.jsonl")
    rng = random.Random(int.from_bytes(os.urandom(4), "little"))
    printed: list[int] = []
    for round_ in range(ROUNDS):
        delay = rng.uniform(0.05, 1.0)
        steps = _run_and_kill(str(script), path, start=round_ * 1_000_000, delay=delay)
        assert steps, f"round {round_}: the child completed no step in {delay:.2f} s"
        printed += steps
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            logged = {record["step"] for record in read_jsonl(path)}  # never raises, torn tail or not
        lost = sorted(set(printed) - logged)
        assert not lost, (f"round {round_} (killed after {delay:.2f} s): steps {lost[:10]} returned but are not "
                          "in the log")
    records = read_jsonl_quiet(path)
    assert all(isinstance(r["metrics"], dict) and "grpo/groups/total" in r["metrics"] for r in records)
    assert len(records) >= len(printed)


def read_jsonl_quiet(path: str) -> list[dict]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_jsonl(path)


def test_a_torn_final_line_is_skipped_and_the_next_run_appends_cleanly(tmp_path):
    """A half-written last line (a crash mid-write) is skipped with a warning; a restart writes on a fresh line."""
    script = tmp_path / "train.py"
    script.write_text(CHILD)
    path = tmp_path / "run.jsonl"
    first = _run_and_kill(str(script), str(path), start=0, delay=0.3)
    with open(path, "ab") as fh:
        fh.write(b'{"step": 999999, "metrics": {"grpo/gro')  # what a kill during write() leaves
    with pytest.warns(RuntimeWarning, match="torn final line"):
        assert {r["step"] for r in read_jsonl(path)} >= set(first)
    second = _run_and_kill(str(script), str(path), start=1_000_000, delay=0.3)
    with pytest.warns(RuntimeWarning, match="unreadable line"):
        steps = [r["step"] for r in read_jsonl(path)]
    assert set(first) | set(second) <= set(steps) and 999999 not in steps
