"""The report's table of the trainer's own numbers: per audited key, the trainer's value against the exact one."""

from __future__ import annotations

import warnings

import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.sinks import JSONLSink
from grpo_monitor.tools.reporting import build_report, load_run


def _log(tmp_path, trl_values):
    """A monitor run whose steps audit TRL's frac_reward_zero_std (the exact value: 1/2, one constant group)."""
    mon = GRPOMonitor(MonitorConfig(group_size=4, on_violation="warn"), sinks=[JSONLSink(tmp_path / "m.jsonl")])
    r = torch.tensor([[1.0, 0, 1, 0], [0.7, 0.7, 0.7, 0.7]])
    a = (r - r.mean(1, keepdim=True)) / (r.std(1, correction=0, keepdim=True) + 1e-4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for value in trl_values:
            mon.observe_rollout(r, advantages=a)
            mon.audit_trainer_metrics("TRL", {"frac_reward_zero_std": value})
            mon.end_step()
        mon.close()
    return tmp_path / "m.jsonl"


def test_table_rows_per_key(tmp_path):
    """Three audited steps, two off: one row with 3 steps, 2 off, the last values and the float32 cause."""
    log = _log(tmp_path, [0.0, 0.5, 0.0])
    run = load_run(log)
    assert [(r["step"], r["trainer"], r["exact"], r["cause"]) for r in run.trainer_metrics] == [
        (0, 0.0, 0.5, "float32_zero_std"), (1, 0.5, 0.5, None), (2, 0.0, 0.5, "float32_zero_std")]
    page = build_report(log, tmp_path / "report").read_text(encoding="utf-8")
    table = page.split('<table id="trainer-metrics">')[1].split("</table>")[0]
    assert "<code>frac_reward_zero_std</code>" in table
    cells = [c.split(">")[-1] for c in table.split("</td>")[2:8]]
    assert cells == ["3", "2", "0", "0.5", "0.5", "float32_zero_std"]


def test_no_audit_no_table(tmp_path):
    """A run without audited trainer values has no such section."""
    mon = GRPOMonitor(MonitorConfig(group_size=2), sinks=[JSONLSink(tmp_path / "m.jsonl")])
    mon.observe_rollout(torch.tensor([[1.0, 0.0]]), advantages=torch.tensor([[1.0, -1.0]]))
    mon.end_step()
    mon.close()
    page = build_report(tmp_path / "m.jsonl", tmp_path / "r").read_text(encoding="utf-8")
    assert "trainer-metrics" not in page and load_run(tmp_path / "m.jsonl").trainer_metrics == []
