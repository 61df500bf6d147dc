"""`grpo-monitor doctor` on the command line: verl's file logger, a grpo-monitor log, exit codes, --json, --out rules,
worded errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_monitor.tools.cli import main
from grpo_monitor.tools.doctor import diagnose, read_recording

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "numpy", "matplotlib", "pydantic", "wandb", "tensorboard", "pyarrow")


def _verl_log(path: Path, steps: int, clip_ratio: float, monkeypatch, entropy_drop: float = 0.0) -> Path:
    """A metrics log written by verl's own FileLogger (``trainer.logger=["file"]``): scalars only."""
    tracking = pytest.importorskip("verl.utils.tracking")
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = tracking.FileLogger("proj", "exp")
    for step in range(1, steps + 1):
        logger.log({"critic/score/mean": 0.3, "response_length/clip_ratio": clip_ratio,
                    "response_length/mean": 511.0, "actor/entropy": 1.0 - entropy_drop * (step - 1) / steps}, step)
    logger.finish()
    return path


@pytest.mark.parametrize("drop, named", [(0.8, True), (0.0, False)], ids=["collapsing", "steady"])
def test_verl_file_logger_entropy(tmp_path, monkeypatch, drop, named):
    """verl's actor/entropy falling steadily from 1.0 to 0.27 over 12 steps is named entropy_collapse with verl's
    options; a steady entropy is not. Findings that need group counts are unsupported, naming the missing key."""
    log = _verl_log(tmp_path / "verl.jsonl", 12, 0.1, monkeypatch, entropy_drop=drop)
    recording = read_recording(log)
    assert recording.kind == "logged scalars (jsonl)" and recording.integration == "verl"
    assert recording.logged["actor/entropy"] == "grpo/entropy/mean"
    found = diagnose(recording)
    assert ("entropy_collapse" in {f.name for f in found.findings}) is named
    assert "grpo/groups/degenerate_rate" in found.unsupported["degenerate_dominated"]
    if named:
        (record,) = [f for f in found.findings if f.name == "entropy_collapse"]
        assert any("actor_rollout_ref.actor" in r for r in record.last["remedies"])  # verl's own options


def test_verl_truncation_share_alone_is_said_to_be_not_enough(tmp_path, monkeypatch):
    """95 % clipped responses in verl's scalars: whether they lose their signal is not recorded, and doctor says so
    instead of naming (or clearing) truncation_dominated."""
    found = diagnose(read_recording(_verl_log(tmp_path / "verl.jsonl", 8, 0.95, monkeypatch)))
    assert "truncation_dominated" not in {f.name for f in found.findings}
    assert "not whether the truncated rows lose their signal" in found.unsupported["truncation_dominated"]


def test_fail_on_levels_and_json(tmp_path, monkeypatch, capsys):
    """--fail-on degraded exits 1 on a degraded run, --fail-on stalled 0 on it, no --fail-on 0; --json parses."""
    log = _verl_log(tmp_path / "verl.jsonl", 12, 0.1, monkeypatch, entropy_drop=0.8)
    assert main(["doctor", str(log)]) == 0
    text = capsys.readouterr().out
    assert "entropy_collapse" in text and "not supported by this recording:" in text
    assert main(["doctor", str(log), "--fail-on", "stalled"]) == 0
    capsys.readouterr()
    assert main(["doctor", str(log), "--fail-on", "degraded", "--json"]) == 1
    record = json.loads(capsys.readouterr().out)
    assert record["worst_status_name"] == "degraded" and record["kind"] == "logged scalars (jsonl)"


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
    code = ("import sys\nfrom grpo_monitor.tools.cli import main\ntry:\n    main(['doctor', '--help'])\n"
            "except SystemExit as e:\n    assert e.code == 0\n"
            f"print('HEAVY', sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stderr and "usage: grpo-monitor doctor" in proc.stdout


def test_a_scan_output_is_recomputed_for_the_scanned_trainer(tmp_path):
    """A `scan` output folder: its replay's verdicts are recomputed (no replay timing) with the remedies of the
    trainer the scanned format comes from."""
    from grpo_monitor.tools.scan import scan_rollouts

    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    rows = {"step": [], "prompt": [], "completion": [], "advantage": [], "reward": []}
    for step in range(1, 7):  # TRL's completions parquet: every group at the top reward
        for i in range(8):
            rows["step"].append(step), rows["prompt"].append(f"q{i // 4}"), rows["completion"].append(f"x{step}")
            rows["advantage"].append(0.0), rows["reward"].append(1.0)
        folder = tmp_path / "out" / "completions"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({k: v[-8:] for k, v in rows.items()}), folder / f"completions_{step:05d}.parquet")
    scan_rollouts(tmp_path / "out", tmp_path / "scan", quiet=True, report=False, tensorboard=False)
    recording = read_recording(tmp_path / "scan")
    assert recording.kind == "scan log" and recording.integration == "trl"
    assert not any(k.startswith("grpo/health/") for k in recording.keys())
    found = diagnose(recording)
    (record,) = [f for f in found.findings if f.name == "degenerate_dominated"]
    assert found.verdicts_from == "tracker" and any("num_generations" in r for r in record.last["remedies"])
    assert "seconds" not in record.last["evidence"]
