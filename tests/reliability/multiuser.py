"""Two local users on one machine: run a snippet as another uid after the imports (as root).

The tests that use it play an attacker (files planted by one uid) and a victim (a training
process of another uid). Python and the project are imported as root, then the process
drops to the victim's uid with ``os.setgid``/``os.setuid``, so the venv need not be readable
by the victim for the imports; what the snippet does afterwards runs with the victim's rights.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

ATTACKER, VICTIM = 12345, 23456

needs_root = pytest.mark.skipif(
    not hasattr(os, "getuid") or os.getuid() != 0,
    reason="plays two local users: needs root to create files as another uid and to drop to it",
)

_PREAMBLE = """
import os, sys, warnings
import torch, grpo_monitor, grpo_monitor.monitor, grpo_monitor.repro.save
os.setgid({uid}); os.setuid({uid})
"""


def shared_tmp() -> Path:
    """A fresh world-writable sticky folder, like ``/tmp``, for one test (pass it as TMPDIR)."""
    folder = Path(tempfile.mkdtemp(prefix="gm-shared-tmp-", dir="/tmp"))
    folder.chmod(0o1777)
    return folder


def plant_dir(path: Path, owner: int = ATTACKER, mode: int = 0o777) -> Path:
    """A folder the attacker made first (owner ``owner``, world-writable by default)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, owner, owner)
    path.chmod(mode)
    return path


def run_as(uid: int, code: str, tmpdir: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``code`` as ``uid`` (after importing torch and grpo_monitor as root), TMPDIR=``tmpdir``."""
    script = textwrap.dedent(_PREAMBLE.format(uid=uid)) + textwrap.dedent(code)
    env = {**os.environ, "TMPDIR": str(tmpdir), "HOME": "/", "PYTHONFAULTHANDLER": "1"}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd="/")


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)
