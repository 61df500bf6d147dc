"""Errors the user reads, never a bare Python error: hostile JSON in GRPO_MONITOR_CONFIG, an audit group size past
what the probes can hold, and a failing sink's warning that keeps the file it could not write."""

from __future__ import annotations

import os
import warnings

import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.integrations._from_env import ENV, settings_from_env
from grpo_monitor.sinks.dispatch import SinkWarning
from grpo_monitor.sinks.jsonl import JSONLSink
from grpo_monitor.tools.cli import main
from references import advantages

HOSTILE_CONFIG = [
    pytest.param("[" * 5000 + "]" * 5000, "nested deeper", id="deep-nesting"),
    pytest.param('{"group_size": ' + "9" * 5000 + "}", "out of range", id="5000-digit-integer"),
    pytest.param('{"sinks": ' + "[" * 3000 + "]" * 3000 + "}", "nested deeper", id="deep-sinks"),
]


@pytest.mark.parametrize("raw, words", HOSTILE_CONFIG)
def test_hostile_json_in_the_environment_config_is_a_worded_value_error(raw, words):
    """A ValueError naming GRPO_MONITOR_CONFIG and what is wrong, not a RecursionError or Python's digit limit."""
    with pytest.raises(ValueError) as info:
        settings_from_env({ENV: raw})
    text = str(info.value)
    assert type(info.value) is ValueError and text.startswith(ENV) and words in text, text
    assert "MonitorConfig" in text


@pytest.mark.parametrize("group_size", [257, 1024, 2**40], ids=["257", "1024", "2-to-the-40"])
def test_an_audit_group_size_past_the_bound_is_a_worded_error(group_size, tmp_path, monkeypatch, capsys):
    """`audit -G` past 256: exit 2 with one line naming -G, the bound and what came, in a second (not 16 GB)."""
    (tmp_path / "adv_fn.py").write_text("def fn(rewards):\n    return rewards - rewards.mean(-1, keepdim=True)\n")
    monkeypatch.chdir(tmp_path)
    code = main(["audit", "adv_fn:fn", "-G", str(group_size)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("grpo-monitor audit: error:"), err
    assert "-G" in err and "from 2 to 256" in err and str(group_size) in err and "Traceback" not in err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device whose writes fail: ENOSPC)")
def test_a_failing_jsonl_sink_warning_names_its_file():
    """A real ENOSPC from os.write on a descriptor carries no file name: the warning still names the file."""
    rewards = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    mon = GRPOMonitor(MonitorConfig(group_size=4), sinks=[JSONLSink("/dev/full", fsync=False)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mon.observe_rollout(rewards, advantages=advantages(rewards, "population", 1e-6))
        mon.end_step()
        mon.close()
    texts = [str(w.message) for w in caught if issubclass(w.category, SinkWarning)]
    assert any("'jsonl' failed at step 0" in t and "/dev/full" in t and "No space left" in t for t in texts), texts
