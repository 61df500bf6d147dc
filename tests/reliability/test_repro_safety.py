"""A breach is raised whatever happens to its repro dump, and the dump is private to its user."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch
from multiuser import ATTACKER, VICTIM, mode_of, needs_root, plant_dir, run_as, shared_tmp

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig, load_repro
from references import advantages

G = 4
R = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
GOOD = advantages(R, "population", 1e-6)
FLIPPED = -GOOD  # a sign flip: advantages decrease with reward


def _monitor(**config) -> GRPOMonitor:
    return GRPOMonitor(MonitorConfig(group_size=G, **config))


def _breach(mon: GRPOMonitor) -> InvariantViolation:
    with pytest.raises(InvariantViolation) as info:
        mon.observe_rollout(R, advantages=FLIPPED)
        mon.end_step()
    return info.value


# ------------------------------------------------------------------- the dump fails
def test_a_dump_that_torch_save_cannot_write_still_raises_the_breach(tmp_path):
    """torch.save's RuntimeError (a real EFBIG from a file-size limit) is named in the message; checking stays on."""
    code = f"""
    import resource, signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, resource.RLIM_INFINITY))
    from grpo_monitor import GRPOMonitor, MonitorConfig, InvariantViolation
    r = torch.randint(0, 2, (512, 4)).float(); r[:, 0] = 1; r[:, 1] = 0
    a = -(r - r.mean(1, keepdim=True)) / (r.std(1, correction=0, keepdim=True) + 1e-6)
    mon = GRPOMonitor(MonitorConfig(group_size=4, repro_dir={str(tmp_path / 'repro')!r}))
    try:
        mon.observe_rollout(r, advantages=a)
    except InvariantViolation as exc:
        print("RAISED", exc.violations[0].repro_path, exc.violations[0].repro_error is not None)
        print("MESSAGE", str(exc))
    print("DISABLED", sorted(mon.disabled_parts))
    """
    import subprocess
    import sys
    import textwrap

    out = subprocess.run([sys.executable, "-c", "import torch\n" + textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=300).stdout
    assert "RAISED None True" in out, out
    assert re.search(r"repro not saved: RuntimeError: .*(fail|writ)", out), out
    assert "DISABLED []" in out


@pytest.mark.parametrize("obstacle", ["file-as-folder", "folder-not-writable"])
def test_an_unwritable_repro_folder_names_the_reason_and_keeps_checking(tmp_path, obstacle):
    """The breach is raised with 'repro not saved: <reason>' and no part of the monitor is switched off."""
    if obstacle == "file-as-folder":
        target = tmp_path / "repro"
        target.write_text("not a folder")
    else:
        if os.getuid() == 0:
            pytest.skip("root writes into read-only folders; the uid-drop tests cover this case")
        target = tmp_path / "ro"
        target.mkdir(mode=0o500)
    mon = _monitor(repro_dir=str(target))
    exc = _breach(mon)
    assert exc.violations[0].repro_path is None
    assert "repro not saved:" in str(exc) and not mon.disabled_parts


def test_each_later_breach_is_raised_too(tmp_path):
    """Three monitors in a row with an impossible dump: every breach raises, none is swallowed."""
    (tmp_path / "repro").write_text("in the way")
    for _ in range(3):
        assert "repro not saved" in str(_breach(_monitor(repro_dir=str(tmp_path / "repro"))))


# ------------------------------------------------------------------- private files
def test_a_planted_symlink_at_the_dump_name_is_never_followed(tmp_path):
    """A symlink at step000000-pid<PID>.pt is left alone: its target is intact, the dump takes the next name."""
    folder = tmp_path / "repro"
    folder.mkdir()
    victim_file = tmp_path / "precious.txt"
    victim_file.write_text("keep me")
    (folder / f"step000000-pid{os.getpid()}.pt").symlink_to(victim_file)
    exc = _breach(_monitor(repro_dir=str(folder)))
    path = Path(exc.violations[0].repro_path)
    assert victim_file.read_text() == "keep me"
    assert path.name == f"step000000-pid{os.getpid()}-1.pt" and not path.is_symlink()
    assert mode_of(path) == 0o600
    assert load_repro(str(path))["step"] == 0


def test_the_default_folder_is_per_user_and_private(tmp_path, monkeypatch):
    """With no repro_dir, dumps go to <tmp>/grpo-monitor-repro-<uid> (0700) as 0600 files."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    exc = _breach(_monitor())
    path = Path(exc.violations[0].repro_path)
    assert path.parent == tmp_path / f"grpo-monitor-repro-{os.getuid()}"
    assert mode_of(path.parent) == 0o700 and mode_of(path) == 0o600


@needs_root
def test_another_users_folder_and_symlinks_are_refused():
    """The attacker's world-writable folder with a symlink at the victim's dump name: the victim's file is
    untouched, the dump goes to a fresh private folder of the victim, and the breach is raised."""
    shared = shared_tmp()
    victim_file = shared / "victim-owned.txt"
    victim_file.write_text("keep me")
    os.chown(victim_file, VICTIM, VICTIM)
    traps = [plant_dir(shared / "grpo-monitor-repro"), plant_dir(shared / f"grpo-monitor-repro-{VICTIM}")]
    code = f"""
    from pathlib import Path
    from grpo_monitor import GRPOMonitor, MonitorConfig, InvariantViolation
    for trap in {[str(t) for t in traps]!r}:  # the attacker guessed the pid: plant at every name it could use
        Path(trap, "step000000-pid%d.pt" % os.getpid()).symlink_to({str(victim_file)!r})
    r = torch.tensor([[1., 0., 1., 0.], [0., 0., 1., 1.]])
    a = -(r - r.mean(1, keepdim=True)) / (r.std(1, correction=0, keepdim=True) + 1e-6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            GRPOMonitor(MonitorConfig(group_size=4)).observe_rollout(r, advantages=a)
        except InvariantViolation as exc:
            print("PATH", exc.violations[0].repro_path)
    print("WARNED", any("refusing" in str(w.message) for w in caught))
    """
    res = run_as(VICTIM, code, shared)
    assert res.returncode == 0, res.stderr
    assert victim_file.read_text() == "keep me"
    path = Path(re.search(r"PATH (\S+)", res.stdout).group(1))
    assert path.parent not in traps and path.parent.parent == shared
    assert os.stat(path.parent).st_uid == VICTIM and mode_of(path.parent) == 0o700 and mode_of(path) == 0o600
    assert "WARNED True" in res.stdout
    assert all(os.stat(t).st_uid == ATTACKER for t in traps)


@needs_root
def test_a_dump_other_users_cannot_read():
    """Another user cannot list the victim's default repro folder nor read a dump in it."""
    shared = shared_tmp()
    res = run_as(VICTIM, """
    from grpo_monitor import GRPOMonitor, MonitorConfig, InvariantViolation
    r = torch.tensor([[1., 0., 1., 0.]]); a = -(r - 0.5) / 0.5
    try:
        GRPOMonitor(MonitorConfig(group_size=4)).observe_rollout(r, advantages=a)
    except InvariantViolation as exc:
        print("PATH", exc.violations[0].repro_path)
    """, shared)
    path = re.search(r"PATH (\S+)", res.stdout).group(1)
    probe = run_as(ATTACKER, f"""
    for attempt in (lambda: os.listdir(os.path.dirname({path!r})), lambda: open({path!r}, "rb").read()):
        try:
            attempt(); print("READ")
        except PermissionError:
            print("DENIED")
    """, shared)
    assert probe.stdout.split() == ["DENIED", "DENIED"], probe.stdout + probe.stderr
