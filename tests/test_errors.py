"""Every exception a user may catch lives in grpo_monitor.errors, is exported from grpo_monitor, and keeps its old
import path and its built-in base."""

from __future__ import annotations

import ast
import importlib
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

import grpo_monitor
from grpo_monitor import errors

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "grpo_monitor"

#: name -> (its old import path, the built-in it must stay catchable as)
OLD_PATHS = {
    "InvariantViolation": ("grpo_monitor.violations", RuntimeError),
    "InputError": ("grpo_monitor.step.inputs", Exception),
    "InputValueError": ("grpo_monitor.step.inputs", ValueError),
    "InputTypeError": ("grpo_monitor.step.inputs", TypeError),
    "MonitorClosedError": ("grpo_monitor.step.guard", RuntimeError),
    "UnknownEstimatorError": ("grpo_monitor.estimators.registry", ValueError),
    "InputFileError": ("grpo_monitor.files", ValueError),
    "LogFormatError": ("grpo_monitor.tools.reporting", ValueError),
    "UnsafePathError": ("grpo_monitor.repro.private_files", PermissionError),
    "UnsafeOutputError": ("grpo_monitor.files", PermissionError),
}


@pytest.mark.parametrize("name", sorted(OLD_PATHS))
def test_each_error_has_one_home_and_every_old_path(name):
    """grpo_monitor.X, grpo_monitor.errors.X and the old module's X are one class, still a subclass of its built-in."""
    module, base = OLD_PATHS[name]
    cls = getattr(errors, name)
    assert cls.__module__ == "grpo_monitor.errors"
    assert getattr(grpo_monitor, name) is cls and name in grpo_monitor.__all__ and name in errors.__all__
    assert getattr(importlib.import_module(module), name) is cls
    assert issubclass(cls, base)


def _defined_exceptions() -> dict[str, str]:
    """Every exception class defined anywhere in the package's source (a class whose base is an ...Error,
    ...Exception or ...Violation): name -> file (read with ast)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            bases = [getattr(b, "id", getattr(b, "attr", "")) for b in getattr(node, "bases", [])]
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") \
                    and any(re.search(r"(Error|Exception|Violation)$", b) for b in bases):  # private: never raised out
                found[node.name] = str(path.relative_to(REPO))
    return found


# Errors a CLI command turns into its exit code and message; a user of the Python API never meets them.
CLI_ONLY = {"ScanInputError", "ContractError"}


def test_no_error_a_user_catches_is_defined_outside_errors_py():
    """Every exception class in the package is defined in errors.py, except the CLI's own (listed here)."""
    outside = {name: where for name, where in _defined_exceptions().items()
               if where != "grpo_monitor/errors.py" and name not in CLI_ONLY}
    assert outside == {}, f"define these in grpo_monitor/errors.py and re-export them: {outside}"


def test_every_error_the_docs_tell_users_to_catch_is_exported():
    """Each `...Error` / `InvariantViolation` name the README or docs/ mention that the package defines is
    importable from grpo_monitor itself."""
    texts = [(REPO / "README.md").read_text(), *(p.read_text() for p in sorted((REPO / "docs").glob("*.md")))]
    mentioned = {m for text in texts for m in re.findall(r"\b([A-Z]\w*(?:Error|Violation))\b", text)}
    ours = mentioned & set(_defined_exceptions())
    assert {"InputValueError", "InputTypeError", "MonitorClosedError", "InvariantViolation"} <= ours
    assert sorted(n for n in ours if not hasattr(grpo_monitor, n)) == []


def test_a_breach_pickles_as_itself():
    """InvariantViolation round-trips through pickle with its records (a Ray actor's breach reaches the driver)."""
    from grpo_monitor import Violation

    exc = errors.InvariantViolation([Violation("zero_group_mean", 3, 0.5, 0.0, (1,), "centre each group")])
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is errors.InvariantViolation and back.violations == exc.violations and str(back) == str(exc)


def test_importing_errors_imports_neither_torch_nor_pydantic():
    """grpo_monitor.errors is light: catching an error costs no torch import."""
    code = "import sys, grpo_monitor.errors; print(sorted({'torch', 'pydantic'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
