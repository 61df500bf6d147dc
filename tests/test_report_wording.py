"""How the report, the demo, ``scan`` and ``compare`` word what a run did: true wording, one formatting rule."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from grpo_monitor.reporting import build_report  # noqa: E402
from test_report_captions import captions, check_page  # noqa: E402  (tests/ is on sys.path under pytest)


def _there_and_back(log: Path) -> Path:
    """3 steps of 2 groups of G=4 whose degenerate rate goes 0%, 50%, 0% (a constant group at step 1 only)."""
    import torch

    from grpo_monitor import GRPOMonitor, MonitorConfig
    from grpo_monitor.sinks import JSONLSink

    monitor = GRPOMonitor(MonitorConfig(group_size=4, std_convention="population"), sinks=[JSONLSink(log)])
    for step in range(3):
        rewards = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0] if step == 1 else [0.0, 1.0, 1.0, 1.0]],
                               dtype=torch.float64)
        std = rewards.std(1, keepdim=True, correction=0)
        monitor.observe_rollout(rewards, advantages=(rewards - rewards.mean(1, keepdim=True)) / (std + 1e-6))
        monitor.end_step()
    monitor.close()
    return log


def test_equal_ends_around_a_move_do_not_read_stayed(tmp_path):
    """A rate at 0% at the first and the last step and 50% between is not "stayed at 0.0%": the caption names the
    range, and the checker refuses the "stayed" wording for it."""
    log = _there_and_back(tmp_path / "monitor.jsonl")
    page = build_report(log).read_text()
    check_page(page, log)
    said = ("The degenerate rate of the training batch was 0.0% at the first step and at the last step, ranging "
            "from 0.0% to 50.0% over the run.")
    assert said in captions(page)["degenerate"], captions(page)["degenerate"]
    bad = page.replace(said[:-1].split(" was ")[0] + " was 0.0% at the first step and at the last step, ranging "
                       "from 0.0% to 50.0% over the run",
                       "The degenerate rate of the training batch stayed at 0.0% from the first step to the last step")
    assert bad != page
    with pytest.raises(AssertionError):
        check_page(bad, log)
