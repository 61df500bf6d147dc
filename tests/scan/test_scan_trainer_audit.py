"""``scan RECORDING --monitor-log LOG``: a trainer's logged values against the monitor's log of the same run."""

from __future__ import annotations

import json
import warnings

import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.sinks import JSONLSink
from grpo_monitor.tools.cli import main


def _monitor_log(tmp_path):
    """Two steps, each with one constant 0.7 group of two: the exact degenerate rate is 0.5."""
    mon = GRPOMonitor(MonitorConfig(group_size=4), sinks=[JSONLSink(tmp_path / "monitor.jsonl")])
    r = torch.tensor([[1.0, 0, 1, 0], [0.7, 0.7, 0.7, 0.7]])
    a = (r - r.mean(1, keepdim=True)) / (r.std(1, correction=0, keepdim=True) + 1e-4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for step in (1, 2):
            mon.observe_rollout(r, advantages=a)
            mon.end_step(step=step)
        mon.close()
    return tmp_path / "monitor.jsonl"


def test_recording_against_the_monitor_log(tmp_path, capsys):
    """TRL's frac_reward_zero_std logged 0.0 then 0.5: the first step is flagged with the float32 cause."""
    log = _monitor_log(tmp_path)
    recording = tmp_path / "trainer.jsonl"
    recording.write_text("\n".join(json.dumps({"step": s, "data": {"train/frac_reward_zero_std": v}})
                                   for s, v in ((1, 0.0), (2, 0.5))) + "\n")
    assert main(["scan", str(recording), "--monitor-log", str(log)]) == 0
    out = capsys.readouterr().out
    assert "step 1: TRL logged frac_reward_zero_std = 0, exact 0.5 (float32_zero_std)" in out
    assert "step 2" not in out and "2 compared, 1 off" in out


def test_missing_log_is_worded(tmp_path, capsys):
    """A --monitor-log that does not exist: exit 2 (the CLI's input error) naming the option."""
    recording = tmp_path / "trainer.jsonl"
    recording.write_text(json.dumps({"step": 1, "data": {"frac_reward_zero_std": 0.0}}) + "\n")
    assert main(["scan", str(recording), "--monitor-log", str(tmp_path / "nope.jsonl")]) != 0
    assert "--monitor-log" in capsys.readouterr().err
