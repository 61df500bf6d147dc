"""Run health inside the monitor (plain API): health.json and questions.json beside the JSONL log, the question
export (Python and CLI), halt_on and RunStalled, alerts at onset and clearing only, the console line, resume."""

from __future__ import annotations

import ast
import io
import json
import os
from pathlib import Path

import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig, RunStalled
from grpo_monitor.health import questions
from grpo_monitor.sinks import ConsoleSink, JSONLSink, read_jsonl
from grpo_monitor.sinks.base import Sink
from grpo_monitor.tools.cli import main as cli_main
from references import advantages

REPO = Path(__file__).resolve().parents[2]
G = 4


class Recorder(Sink):
    """A user sink that keeps its alerts (title, level) in order."""

    name = "recorder"
    synchronous = True

    def __init__(self) -> None:
        self.alerts: list[tuple[str, str]] = []

    def alert(self, title: str, text: str, level: str = "ERROR") -> None:
        self.alerts.append((title, level))


def _rewards(step: int, stalled: bool) -> tuple[torch.Tensor, list[str]]:
    """8 groups: while ``stalled`` 7 saturated (all 1) and one live; else 6 live and q-sat-0 saturated."""
    gen = torch.Generator().manual_seed(step)
    live = (torch.rand(8, G, generator=gen) < 0.5).float()
    live[:, 0], live[:, 1] = 1.0, 0.0  # every live group varies
    saturated = torch.ones(8, G)
    rewards = torch.cat([saturated[:7], live[:1]]) if stalled else torch.cat([saturated[:1], live[:7]])
    ids = [f"q-sat-{i}" for i in range(7)] + ["q-live-0"] if stalled else ["q-sat-0"] + [f"q-live-{i}" for i in
                                                                                     range(7)]
    return rewards, ids


def _one(mon: GRPOMonitor, step: int, stalled: bool):
    r, ids = _rewards(step, stalled)
    mon.observe_rollout(r, advantages=advantages(r, "population", 1e-4), question_ids=ids)
    return mon.end_step()


def _train(mon: GRPOMonitor, phases: list[bool]) -> list:
    return [_one(mon, step, stalled) for step, stalled in enumerate(phases)]


def test_health_json_beside_the_log_each_step(tmp_path):
    """health.json is strict JSON holding the step's status and findings, replaced each step (no temp files)."""
    mon = GRPOMonitor(MonitorConfig(group_size=G), sinks=[JSONLSink(tmp_path / "log.jsonl")])
    for step in range(4):
        report = _one(mon, step, True)
        health = json.loads((tmp_path / "health.json").read_text(), parse_constant=pytest.fail)
        assert health["step"] == report.step and health["status"] == report.health.status
        assert [f["name"] for f in health["active"]] == [f.name for f in report.health.active]
        assert health["metrics"]["grpo/health/status"] == report.metrics["grpo/health/status"]
        assert sorted(os.listdir(tmp_path)) == ["health.json", "log.jsonl"]
    (found,) = [f for f in health["active"] if f["name"] == "degenerate_dominated"]
    assert health["status"] == 2 and found["severity"] == "stalled"
    assert found["evidence"]["saturated_rate"] == pytest.approx(7 / 8)
    assert any("filter" in r for r in found["remedies"])
    mon.close()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    records = read_jsonl(tmp_path / "log.jsonl")
    assert "degenerate_dominated" in records[2]["health"]["opened"]
    assert "degenerate_dominated" not in records[3]["health"]["opened"]


def test_question_export_python_and_cli(tmp_path, capsys):
    """The saturated questions are exactly those whose every group was all 1 (counted from the rewards fed)."""
    mon = GRPOMonitor(MonitorConfig(group_size=G), sinks=[JSONLSink(tmp_path / "log.jsonl")])
    phases = [True, True, False, False]
    _train(mon, phases)
    mon.close()
    seen: dict[str, list[bool]] = {}
    for step, stalled in enumerate(phases):
        r, ids = _rewards(step, stalled)
        for q, row in zip(ids, r, strict=True):
            seen.setdefault(q, []).append(bool((row == 1).all()))
    want = [q for q, sightings in seen.items() if all(sightings)]
    assert sorted(questions(tmp_path / "log.jsonl", "saturated")) == sorted(want)
    assert sorted(questions(tmp_path, "learnable")) == sorted(q for q in seen if q not in want)
    assert cli_main(["questions", str(tmp_path), "--saturated", "--out", str(tmp_path / "ids.json")]) == 0
    assert sorted(json.loads((tmp_path / "ids.json").read_text())) == sorted(want)
    capsys.readouterr()
    assert cli_main(["questions", str(tmp_path / "log.jsonl"), "--unsolved"]) == 0
    assert capsys.readouterr().out == ""
    assert cli_main(["questions", str(tmp_path / "nowhere"), "--saturated"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_halt_on_stalled_raises_run_stalled_naming_the_finding(tmp_path):
    """The step the finding opens is logged (failed), then RunStalled names it; the monitor is closed."""
    mon = GRPOMonitor(MonitorConfig(group_size=G, halt_on=("stalled",)), sinks=[JSONLSink(tmp_path / "l.jsonl")])
    with pytest.raises(RunStalled, match="degenerate_dominated") as caught:
        _train(mon, [True] * 6)
    assert [f.name for f in caught.value.findings] == ["degenerate_dominated"]
    records = read_jsonl(tmp_path / "l.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2] and records[-1]["failed"] is True
    assert mon.closed


def test_the_default_never_stops_on_a_finding():
    """Ten stalled steps without halt_on: every report says stalled, training goes on."""
    mon = GRPOMonitor(MonitorConfig(group_size=G))
    reports = _train(mon, [True] * 10)
    assert [r.health.status for r in reports][2:] == [2] * 8 and not mon.closed


def test_alerts_at_onset_and_clearing_only():
    """Stalled 5 steps, healthy 6, stalled 4: two onsets and one clearing of degenerate_dominated, nothing else."""
    rec = Recorder()
    mon = GRPOMonitor(MonitorConfig(group_size=G), sinks=[rec])
    _train(mon, [True] * 5 + [False] * 6 + [True] * 4)
    mon.close()
    mine = [a for a in rec.alerts if "degenerate_dominated" in a[0]]
    assert mine == [("grpo-monitor: degenerate_dominated (stalled)", "ERROR"),
                    ("grpo-monitor: degenerate_dominated cleared", "INFO"),
                    ("grpo-monitor: degenerate_dominated (stalled)", "ERROR")]


def test_console_prints_the_status_line():
    """The console prints the run-health line, also on the step a finding opens."""
    out = io.StringIO()
    mon = GRPOMonitor(MonitorConfig(group_size=G), sinks=[ConsoleSink(every=100, file=out, use_rich=False)])
    _train(mon, [True] * 3)
    mon.close()
    text = out.getvalue()
    assert "run health: healthy" in text
    assert "run health: stalled: degenerate_dominated (stalled" in text


def test_resume_keeps_open_findings():
    """state_dict carries the health state: a resumed monitor keeps the open finding and its onset step."""
    mon = GRPOMonitor(MonitorConfig(group_size=G))
    _train(mon, [True] * 4)
    state = json.loads(json.dumps(mon.state_dict()))
    again = GRPOMonitor(MonitorConfig(group_size=G))
    again.load_state_dict(state)
    report = _one(again, 4, True)
    (found,) = [f for f in report.health.active if f.name == "degenerate_dominated"]
    assert found.since == 2 and report.health.opened == ()


def test_the_health_package_never_touches_a_tensor():
    """No module of grpo_monitor/health imports torch: it reads the already-synced host floats only."""
    for path in (REPO / "grpo_monitor" / "health").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.split(".")[0] == "torch" for n in names), path.name
