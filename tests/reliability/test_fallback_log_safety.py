"""The fallback JSONL log (`sinks="auto"` with no tracker: a path the monitor chose itself) is created owner-checked
and never through a link another local user planted in a shared working folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from multiuser import ATTACKER, VICTIM, mode_of, needs_root, plant_dir, run_as, shared_tmp

# The victim's training process: the working folder is the shared one, no tracker, one monitored step.
VICTIM_RUN = """
os.chdir({shared!r})
from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.sinks.auto import sinks_for_trackers
r = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
a = (r - r.mean(1, keepdim=True)) / (r.std(1, correction=0, keepdim=True) + 1e-6)
(sink,) = sinks_for_trackers([], framework="test")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    mon = GRPOMonitor(MonitorConfig(group_size=4), sinks=[sink])
    mon.observe_rollout(r, advantages=a)
    mon.end_step()
    mon.close()
print("LOG", sink.path)
print("WARNINGS", [str(w.message)[:200] for w in caught if "sink" in str(w.message)])
"""


def _precious(folder: Path) -> Path:
    """A file of the victim's that a planted link points at."""
    target = folder / "victim-notes.txt"
    target.write_text("precious\n")
    os.chown(target, VICTIM, VICTIM)
    target.chmod(0o600)
    return target


def _plant_folder_with_link(shared: Path, target: Path) -> None:
    planted = plant_dir(shared / "grpo-monitor")
    (planted / "monitor.jsonl").symlink_to(target)
    os.lchown(planted / "monitor.jsonl", ATTACKER, ATTACKER)


def _plant_folder_link(shared: Path, target: Path) -> None:
    elsewhere = plant_dir(shared / "attacker-files")
    (elsewhere / "monitor.jsonl").symlink_to(target)
    (shared / "grpo-monitor").symlink_to(elsewhere)
    os.lchown(shared / "grpo-monitor", ATTACKER, ATTACKER)


def _plant_link_in_own_folder(shared: Path, target: Path) -> None:
    """The victim's own folder from an earlier run, made group-writable: anyone in the group may plant a link."""
    own = plant_dir(shared / "grpo-monitor", owner=VICTIM, mode=0o777)
    (own / "monitor.jsonl").symlink_to(target)
    os.lchown(own / "monitor.jsonl", ATTACKER, ATTACKER)


@needs_root
@pytest.mark.parametrize("plant", [_plant_folder_with_link, _plant_folder_link, _plant_link_in_own_folder],
                         ids=["planted-folder-with-link", "planted-folder-link", "writable-folder-with-link"])
def test_the_fallback_log_never_writes_through_a_planted_folder_or_link(plant):
    """The victim's file stays as it was; the log goes to a fresh private folder (0700, the file 0600), whose
    path is printed with why; the step is in it."""
    shared = shared_tmp()
    target = _precious(Path(shared_tmp()))
    plant(shared, target)
    proc = run_as(VICTIM, VICTIM_RUN.format(shared=str(shared)), shared)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert target.read_text() == "precious\n"
    log = Path(next(ln for ln in proc.stdout.splitlines() if ln.startswith("LOG "))[4:])
    assert log.parent != shared / "grpo-monitor" and log.parent.stat().st_uid == VICTIM
    assert mode_of(log.parent) == 0o700 and mode_of(log) == 0o600 and log.stat().st_uid == VICTIM
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [0]
    assert "refusing to use it" in proc.stderr and str(log) in proc.stderr, proc.stderr[-2000:]
    assert "WARNINGS []" in proc.stdout


@needs_root
def test_the_fallback_log_in_the_victims_own_folder_is_used_and_resumed():
    """No planted file: the log is created where it always was, folder 0700 and file 0600, and a second run
    appends to it (a resume); a user's own folder is no false alarm."""
    shared = shared_tmp()
    for _ in range(2):
        proc = run_as(VICTIM, VICTIM_RUN.format(shared=str(shared)), shared)
        assert proc.returncode == 0, proc.stderr[-3000:]
    log = shared / "grpo-monitor" / "monitor.jsonl"
    assert next(ln for ln in proc.stdout.splitlines() if ln.startswith("LOG ")) == f"LOG {log}"
    assert mode_of(log.parent) == 0o700 and mode_of(log) == 0o600
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [0, 0]
    assert "refusing" not in proc.stderr
