"""The examples in the docstrings of doctor, the report's health modules and the webhook sink run and hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["grpo_monitor.tools.doctor.text", "grpo_monitor.tools.reporting.health_timeline",
           "grpo_monitor.tools.reporting.health_panel", "grpo_monitor.sinks.webhook", "grpo_monitor.tools.scan.logged"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    """Every ``>>>`` example of the module gives the output written under it."""
    pytest.importorskip("matplotlib")
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
