"""`audit MODULE:FUNCTION` and `scan --estimator MODULE:FUNCTION` import the one module the user named from the
working folder and leave `sys.path` as it was: a planted `html.py`, `matplotlib.py` or `tensorboard.py` there
never runs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PLANTED = ("html", "matplotlib", "tensorboard")

ADV = """
import torch

def fn(rewards):
    centred = rewards - rewards.mean(-1, keepdim=True)
    return centred / (rewards.std(-1, correction=0, keepdim=True) + 1e-6)
"""

# After the command: each planted name resolves to the installed module, and the working folder is not on sys.path.
CHECK = """
import importlib.util, json, os, sys
from grpo_monitor.tools.cli import main
code = main({argv!r})
origins = {{name: (importlib.util.find_spec(name).origin if importlib.util.find_spec(name) else None)
           for name in {planted!r}}}
print("RESULT " + json.dumps({{"code": code, "origins": origins,
                               "cwd_on_path": any(p in (os.getcwd(), "") for p in sys.path)}}))
"""


def _rollouts(folder: Path) -> Path:
    path = folder / "rollouts.jsonl"
    path.write_text("".join(json.dumps({"step": s, "group": g, "reward": float((g + i) % 2)}) + "\n"
                            for s in range(2) for g in range(2) for i in range(4)))
    return path


def _plant(folder: Path) -> None:
    (folder / "adv.py").write_text(ADV)
    for name in PLANTED:
        (folder / f"{name}.py").write_text(f"open({str(folder / ('RAN-' + name))!r}, 'w').close()\n")


@pytest.mark.parametrize("command", ["audit", "scan"])
def test_a_planted_module_in_the_working_folder_never_shadows_an_installed_one(command, tmp_path):
    """The named module loads; afterwards html, matplotlib and tensorboard are the installed ones, none of the
    planted files ran, and the working folder is not on sys.path (python -P: Python itself adds nothing)."""
    _plant(tmp_path)
    argv = ["audit", "adv:fn", "-G", "4", "--json"] if command == "audit" else \
        ["scan", str(_rollouts(tmp_path)), "--estimator", "adv:fn", "--out", str(tmp_path / "scan"), "--quiet",
         "--no-report"]
    script = textwrap.dedent(CHECK.format(argv=argv, planted=PLANTED))
    proc = subprocess.run([sys.executable, "-P", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(line[len("RESULT "):])
    assert result["code"] in (0, 1), proc.stderr[-3000:]  # it ran (1: the scan found something)
    assert not result["cwd_on_path"]
    for name, origin in result["origins"].items():
        assert origin is None or not origin.startswith(str(tmp_path)), (name, origin)
    assert not list(tmp_path.glob("RAN-*"))
