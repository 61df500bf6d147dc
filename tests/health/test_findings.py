"""The findings catalogue: complete records, and remedies that name options the trainers really have (TRL's
GRPOConfig fields, verl's config keys, read from the installed packages)."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

import pytest

from grpo_monitor.catalog.findings import INTEGRATIONS, SEVERITIES
from grpo_monitor.catalog.metrics import METRICS
from grpo_monitor.health import FINDINGS


@pytest.mark.parametrize("name", list(FINDINGS))
def test_every_finding_is_complete(name):
    """A severity, a meaning, catalogued evidence keys, causes, remedies for plain loops, a patience >= 1."""
    f = FINDINGS[name]
    assert f.name == name and f.severity in SEVERITIES and f.patience >= 1
    assert f.meaning.endswith(".") and f.causes and f.remedies["api"]
    assert set(f.remedies) <= set(INTEGRATIONS)
    assert [k for k in f.evidence if k not in METRICS] == []
    assert f.key in METRICS and METRICS[f.key].section == "Health"


def _backticked(text: str) -> list[str]:
    """Option names quoted in ``text`` (`name` or `name=value`)."""
    return [m.split("=")[0] for m in re.findall(r"`([A-Za-z_.]+(?:=[^`]*)?)`", text)]


@pytest.mark.slow  # importing trl takes tens of seconds on a loaded machine
def test_trl_remedies_name_grpo_config_fields():
    """Every `option` of a TRL remedy is a field of the installed trl.GRPOConfig (or the dataset's filter)."""
    trl = pytest.importorskip("trl")
    fields = {f.name for f in dataclasses.fields(trl.GRPOConfig)}
    named = {o for f in FINDINGS.values() for r in f.remedies.get("trl", ()) for o in _backticked(r)}
    assert named, "TRL remedies name options"
    assert sorted(o for o in named if o not in fields and not o.startswith("dataset.filter")) == []


def test_verl_remedies_name_config_keys():
    """Every dotted `option` of a verl remedy is a key of the installed verl's trainer config files."""
    spec = importlib.util.find_spec("verl")  # read its config file; importing verl would take a minute
    if spec is None or spec.origin is None:
        pytest.skip("verl is not installed")
    folder = Path(spec.origin).parent / "trainer" / "config"
    text = "\n".join(p.read_text() for p in sorted(folder.rglob("*.yaml")))
    named = {o for f in FINDINGS.values() for r in f.remedies.get("verl", ()) for o in _backticked(r) if "." in o}
    assert named
    missing = []
    for option in sorted(named):
        leaf_and_parent = option.split(".")[-2:]
        if not all(re.search(rf"^\s*{key}:", text, re.M) for key in leaf_and_parent):
            missing.append(option)
    assert missing == []
