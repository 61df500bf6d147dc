"""The config sits between the statistics and the step: estimators/ and stats/ never import it, it never imports step/.

Read with tests/test_floor_plan.py's import reader (every import counts, those inside functions
and under ``TYPE_CHECKING`` included).
"""

from __future__ import annotations

import pytest

from test_floor_plan import _imports, _modules


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def _edges() -> set[tuple[str, str]]:
    mods = _modules()
    return {(_package(name), _package(target)) for name, (path, is_pkg) in mods.items()
            for target in _imports(name, path, is_pkg, mods) if _package(name) != _package(target)}


@pytest.mark.parametrize("other", ["estimators", "stats", "step"], ids=str)
def test_config_and_its_neighbour_do_not_import_each_other(other):
    """config <-> estimators, config <-> stats and config <-> step were cycles (imports inside functions); now
    each pair is one-way."""
    edges = _edges()
    pair = {("grpo_monitor.config", f"grpo_monitor.{other}"), (f"grpo_monitor.{other}", "grpo_monitor.config")}
    assert len(pair & edges) <= 1, sorted(pair & edges)


def test_the_lower_packages_do_not_import_the_config():
    """estimators/ and stats/ read the config through small protocols; step/ reads it, config never reads step/."""
    edges = _edges()
    assert ("grpo_monitor.estimators", "grpo_monitor.config") not in edges
    assert ("grpo_monitor.stats", "grpo_monitor.config") not in edges
    assert ("grpo_monitor.config", "grpo_monitor.step") not in edges
    assert ("grpo_monitor.step", "grpo_monitor.config") in edges  # the reader sees real edges
