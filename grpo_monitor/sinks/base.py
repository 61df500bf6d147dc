"""The one small interface every sink implements, and the run configuration every tracker gets once."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..report import StepReport

if TYPE_CHECKING:
    from ..config import MonitorConfig

#: Prefix of the run parameters the monitor stores in a tracker (W&B config, MLflow params, ...).
PARAMS_PREFIX = "grpo_monitor/"


def run_params(config: MonitorConfig) -> dict[str, str | int | float | bool | None]:
    """The monitor's configuration as flat run parameters, ``grpo_monitor/<field>`` (nested with slashes).

    ``grpo_monitor/estimator`` is the declared advantage estimator (which an integration sets from the
    trainer's config), written once; lists and mappings become JSON text.

    >>> from grpo_monitor import MonitorConfig
    >>> p = run_params(MonitorConfig(group_size=8, estimator="bessel"))
    >>> p["grpo_monitor/estimator"], p["grpo_monitor/group_size"], p["grpo_monitor/tolerances/zero_group_mean"]
    ('bessel', 8, 0.001)
    """
    out: dict[str, str | int | float | bool | None] = {
        f"{PARAMS_PREFIX}version": _version()}
    _flatten(config.model_dump(mode="json"), PARAMS_PREFIX, out)
    return out


def _version() -> str:
    """The installed grpo-monitor's version (read from its metadata: no import of the package here)."""
    try:
        return importlib.metadata.version("grpo-monitor")
    except importlib.metadata.PackageNotFoundError:  # a source tree that is not installed
        return "unknown"


def _flatten(values: dict[str, Any], prefix: str, out: dict[str, Any]) -> None:
    for key, value in values.items():
        if isinstance(value, dict) and value and key != "policies":
            _flatten(value, f"{prefix}{key}/", out)
        elif isinstance(value, (list, tuple, dict)):
            out[prefix + key] = json.dumps(value)
        else:
            out[prefix + key] = value


def require(module: str, what: str, extra: str) -> None:
    """Raise ``ModuleNotFoundError`` saying ``what`` needs and the extra that installs it, when the optional
    ``module`` is not installed (found with ``find_spec``: nothing is imported)."""
    if importlib.util.find_spec(module) is None:
        raise ModuleNotFoundError(f"{what}; install it with `pip install grpo-monitor[{extra}]`")


class Sink:
    """Where a step's report goes. Subclasses override what their backend supports.

    Constructing a sink has no side effects (no files, no runs, no imports of optional
    packages); the backend is opened on first use. ``main_process_only`` sinks are only
    called on rank 0.

    ``synchronous`` chooses how :class:`~grpo_monitor.sinks.SinkSet` calls the sink. False
    (the default: W&B, TensorBoard, console, user sinks): from a thread of its own, fed in
    order from a bounded queue, so a slow or hung backend never delays training; all of
    the sink's calls (``log_report``, ``alert``, ``finish``) come from that one thread, and
    reports are dropped, with a warning, while it is blocked. True, for durable sinks
    (JSONL): inline in the training thread, so a step is written when ``end_step``
    returns; such a sink must be fast, and it is retried on every step after a failure.
    """

    name: str = "sink"
    main_process_only: bool = True
    synchronous: bool = False

    @classmethod
    def from_spec(cls, argument: str | None) -> Sink:
        """The sink a ``GRPO_MONITOR_CONFIG`` spec names (:mod:`grpo_monitor.sinks.registry`): ``cls(argument)``,
        ``cls()`` when the spec takes no argument."""
        return cls() if argument is None else cls(argument)  # type: ignore[call-arg]

    @classmethod
    def for_tracker(cls, *, output_dir: str | os.PathLike | None, tensorboard_dir: str | os.PathLike | None) -> Sink:
        """The sink ``sinks="auto"`` builds for the trainer's tracker of this kind (the trainer's output and
        TensorBoard folders given): ``cls()``, logging into the run the trainer opened."""
        return cls()

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Write scalar metrics for ``step``."""

    def log_histogram(self, key: str, values: Sequence[float], step: int) -> None:
        """Write a distribution (e.g. per-question reward std) for ``step``."""

    def log_table(self, key: str, rows: list[dict[str, Any]], step: int) -> None:
        """Write a table (e.g. per-question history) for ``step``."""

    def alert(self, title: str, text: str, level: str = "ERROR") -> None:
        """Raise an alert in the backend (a breach)."""

    def log_config(self, params: dict[str, Any]) -> None:
        """Store the run's configuration (:func:`run_params`), once per run, before its first report."""

    def capture(self) -> None:
        """Called in the training thread before the sink's first call of a run is queued.

        A background sink is called from a thread of its own; a tracker whose current run
        lives in the training thread (MLflow's active run is thread-local, Trackio's a
        context variable) reads it here, so the sink logs into the run the trainer opened.
        """

    def log_report(self, report: StepReport) -> None:
        """Write a whole step; the default splits it into the calls above."""
        self.log(report.metrics, report.step)
        for key, values in report.histograms.items():
            self.log_histogram(key, values, report.step)
        for key, rows in report.tables.items():
            self.log_table(key, rows, report.step)
        for v in report.violations:
            self.alert(f"grpo-monitor: {v.invariant}", v.message())

    def opening(self) -> bool:
        """True while the backend is not open yet (e.g. ``wandb.init`` running): ``close()`` waits for the opening,
        up to ``OPEN_TIMEOUT`` s, before its ``flush_timeout`` clock starts, so a slow start loses no step."""
        return False

    def note(self, text: str) -> None:
        """Say ``text`` once to the user (as a warning from the training thread): e.g. a metric the backend
        rejects and the sink leaves out."""
        self.__dict__.setdefault("_notes", []).append(text)

    def take_notes(self) -> list[str]:
        """The texts :meth:`note` collected since the last call (emptied)."""
        return self.__dict__.pop("_notes", [])

    def finish(self, failed: bool = False) -> None:
        """Flush and close; ``failed`` marks a run ended by a breach."""
