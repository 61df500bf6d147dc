"""grpo-monitor: what a GRPO update is really made of, checked every step.

>>> from grpo_monitor import GRPOMonitor, MonitorConfig
>>> GRPOMonitor(MonitorConfig(group_size=8)).config.estimator
'auto'

Exports are lazy (as in :mod:`grpo_monitor.sinks`): ``import grpo_monitor`` imports
neither torch nor pydantic, so the ``grpo-monitor`` command line starts at once; each
name is imported from its module on first access.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import re
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import errors as _errors  # every exception a user may catch; imports nothing of the package, nothing heavy

#: Public name -> submodule that defines it.
_LAZY = {
    "ESTIMATORS": "estimators.registry",
    "GRPOMonitor": "monitor",
    "INVARIANTS": "violations",
    "MonitorConfig": "config",
    "StepReport": "report",
    "Tolerances": "config",
    "Violation": "violations",
    "load_repro": "repro.replay",
    "replay": "repro.replay",
    "METRICS": "catalog.metrics",
    **{name: "errors" for name in _errors.__all__},  # a new error: defined and listed in errors.py, exported here
    "FINDINGS": "catalog.findings",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:  # what static tools see; at run time __getattr__ imports on first access
    __version__: str
    from .catalog.findings import FINDINGS as FINDINGS
    from .catalog.metrics import METRICS as METRICS
    from .config import MonitorConfig as MonitorConfig
    from .config import Tolerances as Tolerances
    from .errors import EstimatorFunctionError as EstimatorFunctionError
    from .errors import InputError as InputError
    from .errors import InputFileError as InputFileError
    from .errors import InputTypeError as InputTypeError
    from .errors import InputValueError as InputValueError
    from .errors import InvariantViolation as InvariantViolation
    from .errors import LogFormatError as LogFormatError
    from .errors import MonitorClosedError as MonitorClosedError
    from .errors import RunStalled as RunStalled
    from .errors import UnknownEstimatorError as UnknownEstimatorError
    from .errors import UnsafeOutputError as UnsafeOutputError
    from .errors import UnsafePathError as UnsafePathError
    from .errors import WebhookError as WebhookError
    from .estimators.registry import ESTIMATORS as ESTIMATORS
    from .monitor import GRPOMonitor as GRPOMonitor
    from .report import StepReport as StepReport
    from .repro.replay import load_repro as load_repro
    from .repro.replay import replay as replay
    from .violations import INVARIANTS as INVARIANTS
    from .violations import Violation as Violation


#: Old homes of the offline tools (``grpo_monitor.scan`` ...), now under :mod:`grpo_monitor.tools`.
_MOVED = ("audit", "cli", "demo", "doctor", "reporting", "scan", "theory")


class _MovedTools(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import grpo_monitor.scan`` (and its submodules) is ``grpo_monitor.tools.scan``, with one ``DeprecationWarning``
    per old package: the same module object, so ``isinstance`` and monkeypatching agree under either name."""

    _specs: dict[str, Any] = {}  # new name -> its own spec, which the import system overwrites with the alias's

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        parts = fullname.split(".")
        if len(parts) < 2 or parts[0] != __name__ or parts[1] not in _MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        new = spec.name.replace(f"{__name__}.", f"{__name__}.tools.", 1)
        if spec.name.count(".") == 1:
            warnings.warn(f"{spec.name} moved to {new} in 0.4; the old path is an alias", DeprecationWarning,
                          stacklevel=2)
        module = importlib.import_module(new)
        self._specs[new] = module.__spec__
        return module

    def exec_module(self, module: Any) -> None:
        """The module ran under its new name already; the import system gave it the alias's spec: give it back."""
        module.__spec__ = self._specs[module.__name__]


if not any(isinstance(f, _MovedTools) for f in sys.meta_path):
    sys.meta_path.insert(0, _MovedTools())  # before the path finder, which would load a second copy


def _version() -> str:
    """The installed distribution's version; in a bare checkout on ``PYTHONPATH``, ``pyproject.toml``'s."""
    from importlib import metadata

    try:
        return metadata.version("grpo-monitor")
    except metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        found = re.search(r'^version = "([^"]+)"', pyproject.read_text(), re.M) if pyproject.is_file() else None
        return found.group(1) if found else "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":  # looked up on first use: `import grpo_monitor` stays instant
        globals()[name] = _version()
        return globals()[name]
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
