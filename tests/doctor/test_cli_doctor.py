"""`grpo-monitor doctor` on the command line: verl's file logger, a grpo-monitor log, exit codes, --json, --out rules,
worded errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_monitor.cli import main
from grpo_monitor.doctor import diagnose, read_recording

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "numpy", "matplotlib", "pydantic", "wandb", "tensorboard", "pyarrow")


def _verl_log(path: Path, steps: int, clip_ratio: float, monkeypatch) -> Path:
    """A metrics log written by verl's own FileLogger (``trainer.logger=["file"]``): TRL-free, scalars only."""
    tracking = pytest.importorskip("verl.utils.tracking")
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = tracking.FileLogger("proj", "exp")
    for step in range(1, steps + 1):
        logger.log({"critic/score/mean": 0.1 * step, "response_length/clip_ratio": clip_ratio,
                    "response_length/mean": 511.0, "actor/entropy": 0.9}, step)
    logger.finish()
    return path


@pytest.mark.parametrize("clip_ratio, opened", [(0.95, True), (0.05, False)], ids=["truncated", "stops"])
def test_verl_file_logger_truncation(tmp_path, monkeypatch, clip_ratio, opened):
    """verl's response_length/clip_ratio is the truncated share: 95 % over 8 steps opens truncation_dominated,
    5 % does not; findings that need group counts are listed as unsupported, with the missing key."""
    log = _verl_log(tmp_path / "verl.jsonl", 8, clip_ratio, monkeypatch)
    recording = read_recording(log)
    assert recording.kind == "logged scalars (jsonl)" and recording.integration == "verl"
    assert recording.logged["response_length/clip_ratio"] == "grpo/rows/truncated_rate"
    found = diagnose(recording)
    assert ("truncation_dominated" in {f.name for f in found.findings}) is opened
    assert "grpo/groups/degenerate_rate" in found.unsupported["degenerate_dominated"]
    if opened:
        (record,) = [f for f in found.findings if f.name == "truncation_dominated"]
        assert any("data.max_response_length" in r for r in record.last["remedies"])  # verl's own option


def test_fail_on_levels_and_json(tmp_path, monkeypatch, capsys):
    """--fail-on stalled exits 1 on a stalled run, 0 without --fail-on; --json is one parseable object."""
    log = _verl_log(tmp_path / "verl.jsonl", 8, 0.95, monkeypatch)
    assert main(["doctor", str(log)]) == 0
    text = capsys.readouterr().out
    assert "truncation_dominated" in text and "not supported by this recording:" in text
    assert main(["doctor", str(log), "--fail-on", "degraded", "--json"]) == 1
    record = json.loads(capsys.readouterr().out)
    assert record["worst_status"] >= 1 and record["kind"] == "logged scalars (jsonl)"


def test_a_monitor_log_with_health_records_gives_the_live_verdicts(tmp_path):
    """A grpo-monitor log whose records hold `health` is read as the run saw it (not recomputed)."""
    from grpo_monitor import GRPOMonitor, MonitorConfig
    from grpo_monitor.sinks import JSONLSink

    torch = pytest.importorskip("torch")
    monitor = GRPOMonitor(MonitorConfig(group_size=4), sinks=[JSONLSink(tmp_path / "monitor.jsonl")])
    for step in range(6):  # every group constant at the top reward: degenerate, saturated
        rewards = torch.ones(8)
        monitor.observe_rollout(rewards=rewards, advantages=torch.zeros(8), group_ids=torch.arange(8) // 4)
        monitor.end_step(step=step)
    monitor.close()
    recording = read_recording(tmp_path)
    assert recording.kind == "monitor log" and set(recording.health) == set(range(6))
    found = diagnose(recording)
    assert found.verdicts_from == "recorded" and "degenerate_dominated" in {f.name for f in found.findings}


@pytest.mark.parametrize("argv, message", [
    (["doctor", "{tmp}/missing"], "RUN {tmp}/missing: no such file or folder"),
    (["doctor", "{tmp}/empty"], "found no recorded rollouts"),
    (["doctor", "{tmp}/verl.jsonl", "--out", "{tmp}/verl.jsonl"], "is inside the input"),
    (["doctor", "{tmp}/verl.jsonl", "--out", "{tmp}/exists.json"], "already exists; pass --overwrite"),
    (["doctor", "{tmp}/verl.jsonl", "--out", "{tmp}/empty"], "is a folder"),
], ids=["missing", "no-recording", "out-is-input", "out-exists", "out-is-folder"])
def test_bad_input_is_exit_2_with_a_worded_error(tmp_path, monkeypatch, capsys, argv, message):
    """Usage and input errors exit 2 with one line naming the argument; nothing is written."""
    _verl_log(tmp_path / "verl.jsonl", 2, 0.5, monkeypatch)
    (tmp_path / "empty").mkdir()
    (tmp_path / "exists.json").write_text("{}")
    args = [a.format(tmp=tmp_path) for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("grpo-monitor doctor: error: ") and message.format(tmp=tmp_path) in err
    assert (tmp_path / "exists.json").read_text() == "{}"


def test_out_writes_the_json_atomically(tmp_path, monkeypatch, capsys):
    """--out FILE holds the same JSON --json prints; --overwrite replaces it."""
    log = _verl_log(tmp_path / "verl.jsonl", 4, 0.95, monkeypatch)
    capsys.readouterr()  # verl's logger prints where it writes
    out = tmp_path / "diag" / "doctor.json"
    assert main(["doctor", str(log), "--out", str(out), "--json"]) == 0
    assert json.loads(out.read_text()) == json.loads(capsys.readouterr().out)
    assert main(["doctor", str(log), "--out", str(out), "--overwrite"]) == 0
    assert json.loads(out.read_text())["steps"] == 4 and not list(out.parent.glob(".doctor-*"))


def test_help_imports_nothing_heavy():
    """`doctor --help` answers without importing torch, numpy, matplotlib or pyarrow."""
    code = ("import sys\nfrom grpo_monitor.cli import main\ntry:\n    main(['doctor', '--help'])\nexcept SystemExit as e:\n"
            f"    assert e.code == 0\nprint('HEAVY', sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stderr and "usage: grpo-monitor doctor" in proc.stdout
