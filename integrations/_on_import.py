"""Run a callback right after a module is first imported, before any importer sees it.

An attach in Ray's ``worker_process_setup_hook`` runs before the worker has received its
first task. Ray cannot submit a task or create an actor from there: under Ray 2.51 and
2.60 ``ActorClass.remote()`` in a setup hook aborts the worker (``CoreWorker::
OverrideTaskOrActorRuntimeEnvInfo`` hands back the worker's current runtime env, which only
its first task sets, and ``SharedLruCache::Put`` checks ``value != nullptr``) before the
actor it was started for runs. A framework module whose import submits to Ray
(SkyRL's ``ppo_utils`` registers its estimators and losses into a named ``RegistryActor``
at import time when Ray is initialized) must therefore not be imported by the hook. An
:class:`ImportWatch` defers the attach instead: it patches the module when the trainer's
own code imports it (inside its task, where Ray is ready), before the importing statement
binds any name from it, so ``from ppo_utils import f`` gets the wrapper too.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any


class ImportWatch(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` finder calling ``callback(module)`` once, after the first of ``names`` is executed.

    It finds nothing itself: it asks the finders after it for the spec and wraps the
    spec's loader. A failing callback warns and never fails the import. :meth:`cancel`
    removes it (the callback is then never called).
    """

    def __init__(self, names: Sequence[str], callback: Callable[[ModuleType], None], label: str):
        self.names = frozenset(names)
        self.callback = callback
        self.label = label
        self.fired = False
        self._lock = threading.RLock()
        self._searching: set[str] = set()

    def install(self) -> ImportWatch:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)
        return self

    def cancel(self) -> None:
        """Remove the watch from ``sys.meta_path`` (no-op when removed)."""
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, fullname: str, path: Any, target: ModuleType | None = None) -> Any:
        if fullname not in self.names or fullname in self._searching or self.fired:
            return None
        self._searching.add(fullname)
        try:
            spec = _spec_from_others(self, fullname, path, target)
        finally:
            self._searching.discard(fullname)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _NotifyingLoader(spec.loader, self._executed)
        return spec

    def _executed(self, module: ModuleType) -> None:
        with self._lock:
            if self.fired:
                return
            self.fired = True
            self.cancel()
        try:
            self.callback(module)
        except Exception as exc:  # noqa: BLE001 - the monitor's fault must never break the trainer's import
            warnings.warn(f"grpo-monitor ({self.label}): attaching on import of {module.__name__} failed "
                          f"({type(exc).__name__}: {exc}); nothing is checked", RuntimeWarning, stacklevel=2)


def _spec_from_others(watch: ImportWatch, fullname: str, path: Any, target: ModuleType | None) -> Any:
    for finder in list(sys.meta_path):
        if finder is watch or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


class _NotifyingLoader(importlib.abc.Loader):
    """``loader`` whose ``exec_module`` calls ``done(module)`` once the module's code has run."""

    def __init__(self, loader: Any, done: Callable[[ModuleType], None]):
        self._loader = loader
        self._done = done

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._done(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, is_package, ... of the real loader
        return getattr(self._loader, name)


def when_imported(names: Sequence[str], callback: Callable[[ModuleType], None], label: str) -> ImportWatch | None:
    """``callback(module)`` after the first of ``names`` is imported; now (returning None) when one already is.

    >>> import json
    >>> when_imported(["json"], lambda m: print(m.__name__), "doc")
    json
    """
    for name in names:
        module = sys.modules.get(name)
        if module is not None:
            callback(module)
            return None
    return ImportWatch(names, callback, label).install()
