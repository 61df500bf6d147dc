"""The examples in the docstrings of the file rules, the terminal escaping and the estimator lookup run and hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["grpo_monitor.files.reading", "grpo_monitor.files.writing", "grpo_monitor.tools.cli",
           "grpo_monitor.estimators.registry"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    """Every ``>>>`` example of the module gives the output written under it."""
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
