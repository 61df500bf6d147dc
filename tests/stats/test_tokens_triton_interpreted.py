"""The Triton kernel's cases of ``test_tokens_triton.py`` on this CPU, under Triton's interpreter, in a subprocess.

``TRITON_INTERPRET=1`` must be set before the kernel module is imported (``triton.jit`` reads it
then), so the cases run in a fresh ``pytest`` process started with it; this test fails with
that process's output when any case fails, and requires that none was skipped.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.timeout(300)
@pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                    reason="triton is not installed (pip install grpo-monitor[test] on Linux)")
def test_triton_kernel_under_the_interpreter_equals_the_references():
    """Every ``cpu`` case of test_tokens_triton.py passes under TRITON_INTERPRET=1, none skipped."""
    here = Path(__file__).parent
    env = dict(os.environ, TRITON_INTERPRET="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "cpu or never_select",
           str(here / "test_tokens_triton.py")]
    res = subprocess.run(cmd, cwd=here.parent.parent, env=env, capture_output=True, text=True, timeout=280)
    tail = (res.stdout + res.stderr)[-6000:]
    assert res.returncode == 0, tail
    summary = re.search(r"(\d+) passed", tail)
    assert summary and int(summary.group(1)) >= 25 and "skipped" not in tail.splitlines()[-1], tail
