"""The sink registry is the one list: every row is reachable by spec, by tracker and by its lazy export, alike."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

import pytest
import tomllib

import grpo_monitor.sinks as sinks_package
from grpo_monitor.sinks import Sink
from grpo_monitor.sinks import registry as R
from grpo_monitor.sinks.auto import SUPPORTED, sinks_for_trackers, sinks_from_specs

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
KINDS = list(R.SINKS.values())


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_a_row_names_a_sink_class_of_that_name_and_a_real_extra(kind):
    """The row's class is a Sink whose ``name`` is the row's, exported lazily by grpo_monitor.sinks; its extra is
    one pyproject.toml defines (the worded install error names it), and an extra comes with a backend package."""
    cls = kind.load()
    assert issubclass(cls, Sink) and cls.name == kind.name
    assert getattr(sinks_package, kind.cls) is cls
    module = importlib.import_module(cls.__module__)
    assert all(getattr(sinks_package, name) is getattr(module, name) for name in kind.exports)
    assert kind.extra is None or kind.extra in EXTRAS, kind.extra
    assert (kind.extra is None) == (kind.backend is None), kind


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_every_row_builds_from_its_spec_without_side_effects(kind, tmp_path):
    """``name`` or ``name:ARGUMENT`` (GRPO_MONITOR_CONFIG's "sinks") builds the row's class; nothing is written."""
    arg = {"PATH": str(tmp_path / "m.jsonl"), "DIR": str(tmp_path / "tb"), "URL": "https://hooks.example/x"}
    spec = f"{kind.name.upper()}:{arg[kind.argument]}" if kind.argument else kind.name
    (sink,) = sinks_from_specs([spec])
    assert type(sink) is kind.load()
    assert list(tmp_path.iterdir()) == []
    if kind.required:
        with pytest.raises(ValueError, match=re.escape(f"needs a path: {kind.name}:{kind.argument}")):
            sinks_from_specs([kind.name])
    elif not kind.argument:
        with pytest.raises(ValueError, match="unknown sink spec"):
            sinks_from_specs([f"{kind.name}:x"])


@pytest.mark.parametrize("tracker", sorted(R.TRACKERS), ids=sorted(R.TRACKERS))
def test_every_tracker_of_the_registry_gets_its_sink(tracker, tmp_path):
    """``sinks="auto"`` with the trainer's tracker ``tracker`` gives the row's sink, no fallback log, no warning;
    TensorBoard's goes into the trainer's folder."""
    (sink,) = sinks_for_trackers([tracker], framework="test", output_dir=tmp_path)
    assert type(sink) is R.TRACKERS[tracker].load() and tracker in SUPPORTED
    if tracker == "tensorboard":
        assert sink.log_dir == str(tmp_path / "runs")
    assert list(tmp_path.iterdir()) == []


def test_the_specs_and_trackers_are_the_rows():
    """SPECS and SUPPORTED are read off the rows: nothing is listed twice."""
    assert R.SPECS == ("auto", "jsonl:PATH", "tensorboard:DIR", "wandb", "trackio", "mlflow", "console", "webhook:URL")
    assert set(SUPPORTED) == {t for k in KINDS for t in k.trackers} == {"wandb", "tensorboard", "trackio", "mlflow"}


def test_a_missing_backend_names_the_rows_extra(monkeypatch):
    """A sink whose backend is not installed says which extra installs it: the row's (here a row whose backend is a
    package that does not exist, as on a minimal install)."""
    row = dataclasses.replace(R.SINKS["wandb"], backend="grpo_monitor_no_such_backend", extra="wandb")
    monkeypatch.setitem(R.SINKS, "wandb", row)
    with pytest.raises(ModuleNotFoundError, match=re.escape("install it with `pip install grpo-monitor[wandb]`")):
        sinks_package.WandbSink(project="p").run  # noqa: B018 - the property opens the backend
