"""Run-health alerts reach the trackers at a finding's onset and clearing only: W&B offline and TensorBoard event
files, read back."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from grpo_monitor import GRPOMonitor, MonitorConfig  # noqa: E402
from grpo_monitor.sinks import TensorBoardSink  # noqa: E402
from references import advantages  # noqa: E402

G = 4


def _train(mon: GRPOMonitor, phases: list[bool]) -> None:
    """8 groups per step: 7 saturated while stalled, else 1."""
    for step, stalled in enumerate(phases):
        r = (torch.rand(8, G, generator=torch.Generator().manual_seed(step)) < 0.5).float()
        r[:, 0], r[:, 1] = 1.0, 0.0
        r[: 7 if stalled else 1] = 1.0
        mon.observe_rollout(r, advantages=advantages(r, "population", 1e-4))
        mon.end_step()
    mon.close()


def test_tensorboard_gets_onset_and_clearing_as_text(tmp_path):
    """Stalled 4 steps, healthy 4: two alert texts, at the onset step (2) and the clearing step (6)."""
    mon = GRPOMonitor(MonitorConfig(group_size=G), sinks=[TensorBoardSink(tmp_path)])
    _train(mon, [True] * 4 + [False] * 4)
    acc = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0})
    acc.Reload()
    events = acc.Tensors("grpo/alerts/text_summary")
    texts = [(e.step, e.tensor_proto.string_val[0].decode()) for e in events]
    assert [step for step, _ in texts] == [2, 6]
    assert "ERROR: grpo-monitor: degenerate_dominated (stalled)" in texts[0][1]
    assert "INFO: grpo-monitor: degenerate_dominated cleared" in texts[1][1]


def test_wandb_gets_onset_and_clearing_alerts(wandb_offline):
    """The same run into W&B offline: the .wandb file holds exactly the two alerts, ERROR then INFO."""
    from grpo_monitor.sinks import WandbSink
    from grpo_monitor.sinks import wandb_reader as R

    sink = WandbSink(project="p")
    mon = GRPOMonitor(MonitorConfig(group_size=G), sinks=[sink])
    _train(mon, [True] * 4 + [False] * 4)
    records = R.wait_for_exit(next(wandb_offline.rglob("*.wandb")))
    alerts = [(a["title"], a["level"]) for a in R.alerts(records)]
    assert alerts == [("grpo-monitor: degenerate_dominated (stalled)", "ERROR"),
                      ("grpo-monitor: degenerate_dominated cleared", "INFO")]
