"""The examples in the scan modules' docstrings run and hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["columns", "compare", "detect", "groups", "jsonlines", "progress", "readers", "rows", "summary", "tally"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    """Every ``>>>`` example of grpo_monitor.tools.scan.<name> gives the output written under it."""
    module = importlib.import_module(f"grpo_monitor.tools.scan.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and (result.attempted > 0 or name in ("detect",))
