"""add_metrics checks its keys and values at the boundary; what it accepts reaches every sink."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.sinks.jsonl import JSONLSink
from grpo_monitor.step.inputs import InputTypeError, InputValueError
from references import advantages

R = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
ADV = advantages(R, "population", 1e-6)

BAD = [
    pytest.param({"": 1.0}, InputValueError, "non-empty strings", id="empty-key"),
    pytest.param({"   ": 1.0}, InputValueError, "non-empty strings", id="blank-key"),
    pytest.param({3: 1.0}, InputValueError, "non-empty strings", id="int-key"),
    pytest.param({"grpo/groups/degenerate_rate": 0.123}, InputValueError, "monitor's own section", id="collision"),
    pytest.param({"grpo/monitor/disabled_parts": 0.0}, InputValueError, "monitor's own section", id="health-key"),
    pytest.param({"custom/x": "0.5"}, InputTypeError, r"metrics\['custom/x'\] must be a finite number", id="str-value"),
    pytest.param({"custom/x": None}, InputTypeError, r"metrics\['custom/x'\] must be a finite number", id="none"),
    pytest.param({"custom/x": [1.0]}, InputTypeError, "must be a finite number", id="list"),
    pytest.param({"custom/x": math.nan}, InputValueError, "must be a finite number, but got nan", id="nan"),
    pytest.param({"custom/x": -math.inf}, InputValueError, "must be a finite number", id="inf"),
    pytest.param(["custom/x", 1.0], InputTypeError, "metrics must be a dict", id="not-a-dict"),
]


@pytest.mark.parametrize("metrics, error, match", BAD)
def test_bad_keys_and_values_are_refused_naming_the_argument(metrics, error, match):
    """Each bad entry raises the input error that names it; nothing of the call is kept."""
    mon = GRPOMonitor(MonitorConfig(group_size=4))
    with pytest.raises(error, match=match):
        mon.add_metrics(metrics)
    mon.observe_rollout(R, advantages=ADV)
    metrics_out = mon.end_step().metrics
    assert metrics_out["grpo/groups/degenerate_rate"] == 0.5  # never overwritten
    assert not any(k.startswith("custom/") for k in metrics_out)


@pytest.mark.parametrize("value", [1, 0.25, np.float32(0.25), np.int64(2), torch.tensor(0.25), True],
                         ids=["int", "float", "np.float32", "np.int64", "torch-0d", "bool"])
def test_numbers_of_any_kind_are_logged_as_floats(value, tmp_path):
    """Python, numpy and 0-d torch numbers are accepted and written as plain floats."""
    mon = GRPOMonitor(MonitorConfig(group_size=4), sinks=[JSONLSink(tmp_path / "m.jsonl")])
    mon.add_metrics({"grpo/user/value": value, "grpo/trl/gap": 0.0})
    report = mon.end_step()
    mon.close()
    assert report.metrics["grpo/user/value"] == float(value)
    line = json.loads((tmp_path / "m.jsonl").read_text())
    assert line["metrics"]["grpo/user/value"] == float(value)


def test_accepted_metrics_reach_wandb_like_keys_only(tmp_path):
    """Forty steps with a user metric: all forty JSONL rows carry it (nothing dropped downstream)."""
    mon = GRPOMonitor(MonitorConfig(group_size=4), sinks=[JSONLSink(tmp_path / "m.jsonl")])
    for i in range(40):
        mon.add_metrics({"custom/lr": 1e-6 * i})
        mon.end_step()
    mon.close()
    rows = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["metrics"]["custom/lr"] for r in rows] == [1e-6 * i for i in range(40)]
