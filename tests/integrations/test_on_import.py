"""Attaching when a framework module is imported (the Ray setup-hook path): the callback runs once, after
the module's code and before the importer binds its names; cancelling, a failing callback, and the deferred
``attach_from_env_on_import`` with its Slot."""

from __future__ import annotations

import sys
import textwrap

import pytest

from grpo_monitor.integrations._entrypoint import Slot
from grpo_monitor.integrations._from_env import ENV, attach_from_env_on_import
from grpo_monitor.integrations._on_import import ImportWatch, when_imported


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A fresh package ``fw_<test>`` with a module ``ppo`` (defining ``compute``) and ``trainer`` importing it."""
    name = f"fw_{abs(hash(str(tmp_path))) % 10**8}"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "ppo.py").write_text(textwrap.dedent("""
        LOADED = True
        def compute(x):
            return x + 1
    """))
    (root / "trainer.py").write_text(f"from {name}.ppo import compute\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]
    for finder in [f for f in sys.meta_path if isinstance(f, ImportWatch)]:
        sys.meta_path.remove(finder)


def _double(module):
    original = module.compute
    module.compute = lambda x: 2 * original(x)


def test_the_callback_patches_before_the_importer_binds(package):
    """``from pkg.ppo import compute`` in the first importer gets what the callback put there; it runs once."""
    seen = []
    watch = when_imported([f"{package}.ppo"], lambda m: (seen.append(m.LOADED), _double(m)), "test")
    assert isinstance(watch, ImportWatch) and watch in sys.meta_path and f"{package}.ppo" not in sys.modules
    trainer = __import__(f"{package}.trainer", fromlist=["compute"])
    assert trainer.compute(1) == 4 and seen == [True]
    assert watch not in sys.meta_path  # removed once fired
    assert sys.modules[f"{package}.ppo"].compute(1) == 4 and seen == [True]


def test_an_imported_module_is_handled_now(package):
    """A module already imported: the callback runs at once and no watch is installed."""
    ppo = __import__(f"{package}.ppo", fromlist=["compute"])
    assert when_imported([f"{package}.ppo"], _double, "test") is None
    assert ppo.compute(1) == 4 and not any(isinstance(f, ImportWatch) for f in sys.meta_path)


def test_cancel_removes_the_watch(package):
    """A cancelled watch never calls back."""
    seen = []
    watch = when_imported([f"{package}.ppo"], seen.append, "test")
    assert watch is not None
    watch.cancel()
    __import__(f"{package}.ppo")
    assert seen == [] and watch not in sys.meta_path


def test_a_failing_callback_warns_and_the_import_succeeds(package):
    """The monitor's fault never breaks the trainer's import: a RuntimeWarning names the module."""
    def boom(module):
        raise KeyError("nope")

    when_imported([f"{package}.ppo"], boom, "fw")
    with pytest.warns(RuntimeWarning, match=rf"grpo-monitor \(fw\): attaching on import of {package}\.ppo failed"):
        ppo = __import__(f"{package}.ppo", fromlist=["compute"])
    assert ppo.compute(1) == 2


def test_attach_from_env_on_import_defers_then_attaches_once(package, monkeypatch):
    """Deferred: None and a pending watch (attach() refused meanwhile); the import attaches with the env's config."""
    monkeypatch.setenv(ENV, '{"group_size": 4, "sinks": []}')
    slot, calls = Slot("fw"), []

    def attach(config=None, sinks=None):
        slot.check_free()
        calls.append((config.group_size, sinks))
        slot.current = object()  # what claim() does
        return slot.current

    assert attach_from_env_on_import(attach, slot, [f"{package}.ppo"]) is None and slot.pending is not None
    with pytest.raises(RuntimeError, match="waiting for the import of"):
        slot.check_free()
    assert attach_from_env_on_import(attach, slot, [f"{package}.ppo"]) is None  # a second hook call: no-op
    __import__(f"{package}.ppo")
    assert calls == [(4, [])] and slot.pending is None and slot.current is not None
    assert attach_from_env_on_import(attach, slot, [f"{package}.ppo"]) is slot.current


def test_release_cancels_a_pending_attach_and_bad_env_fails_the_hook(package, monkeypatch):
    """detach() before the import: nothing attaches later. A malformed GRPO_MONITOR_CONFIG raises in the hook."""
    slot, calls = Slot("fw"), []
    monkeypatch.setenv(ENV, "")
    attach_from_env_on_import(lambda **kw: calls.append(kw), slot, [f"{package}.ppo"])
    slot.release()
    __import__(f"{package}.ppo")
    assert calls == [] and slot.pending is None
    monkeypatch.setenv(ENV, "{not json")
    with pytest.raises(ValueError, match=f"{ENV} is not valid JSON"):
        attach_from_env_on_import(lambda **kw: None, Slot("fw2"), [f"{package}.other"])
