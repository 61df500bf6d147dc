"""The offline tools moved under grpo_monitor.tools in 0.4; their 0.3 import paths still work, with a warning."""

from __future__ import annotations

import subprocess
import sys

import pytest

OLD = ["audit", "cli", "demo", "doctor", "reporting", "scan", "theory"]


@pytest.mark.parametrize("name", OLD)
def test_the_old_path_is_the_same_module_and_warns_once(name):
    """``import grpo_monitor.<tool>`` gives the module of ``grpo_monitor.tools.<tool>`` itself (not a second copy)
    and one DeprecationWarning naming the new path; importing it again says nothing more."""
    code = (
        "import warnings, importlib\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        f"    old = importlib.import_module('grpo_monitor.{name}')\n"
        f"    again = importlib.import_module('grpo_monitor.{name}')\n"
        f"new = importlib.import_module('grpo_monitor.tools.{name}')\n"
        "said = [str(w.message) for w in seen if w.category is DeprecationWarning]\n"
        "print(old is new, again is new, len(said), said[0] if said else '')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[:3] == ["True", "True", "1"], out
    assert f"grpo_monitor.tools.{name}" in " ".join(out[3:])


def test_documented_old_imports_still_work():
    """What 0.3's docs and examples import by the old paths: scan's functions, log_digest, the theory module."""
    code = (
        "import warnings\nwarnings.simplefilter('ignore')\n"
        "from grpo_monitor.scan import parse_columns, scan_rollouts, format_summary\n"
        "from grpo_monitor.scan.logged import LOGGED_KEYS\n"
        "from grpo_monitor.reporting import log_digest\n"
        "import grpo_monitor.theory, grpo_monitor.tools.scan.logged as new\n"
        "import grpo_monitor.scan.logged as old\n"
        "print(old is new, callable(log_digest), bool(LOGGED_KEYS))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True", "True"]


def test_an_unknown_name_is_still_not_found():
    """The alias covers the moved tools only: another missing submodule still raises ModuleNotFoundError."""
    with pytest.raises(ModuleNotFoundError):
        __import__("grpo_monitor.no_such_tool")
