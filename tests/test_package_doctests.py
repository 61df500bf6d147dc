"""Every ``>>>`` example in the docstrings of grpo_monitor and its integrations gives the output under it."""

from __future__ import annotations

import doctest
import importlib
import pathlib
import warnings

import pytest

import grpo_monitor

ROOT = pathlib.Path(grpo_monitor.__file__).parent
INTEGRATIONS = pathlib.Path(importlib.import_module("grpo_monitor.integrations").__file__).parent


def _modules_with_examples() -> list[str]:
    """Dotted names of the modules whose source holds a ``>>>`` example (found by reading, not importing)."""
    names = []
    for top, package in ((ROOT, "grpo_monitor"), (INTEGRATIONS, "grpo_monitor.integrations")):
        for path in sorted(top.rglob("*.py")):
            if top == ROOT and INTEGRATIONS in path.parents or ">>> " not in path.read_text(errors="ignore"):
                continue
            parts = path.relative_to(top).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            names.append(".".join((package, *parts)))
    return names


MODULES = _modules_with_examples()


def test_examples_are_found():
    """The walk finds the modules known to carry examples (so an empty list cannot pass unseen)."""
    assert {"grpo_monitor.health.tracker", "grpo_monitor.stats.weights", "grpo_monitor.step.inputs.tensors"} <= set(
        MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    """The module's examples run and hold (ELLIPSIS and NORMALIZE_WHITESPACE, as the docs write them)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the 0.3 alias modules say so once on import
        module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed (run pytest -s)"
