"""``sinks="auto"``: the sinks that follow the trainer's own trackers, and a JSONL log when none is left.

A trainer names its trackers in its config (TRL/HF ``report_to``, verl's and SkyRL's
``trainer.logger``, OpenRLHF's ``use_wandb``/``use_tensorboard``, ...). Each integration
reads its names and hands them to :func:`sinks_for_trackers`, which gives one sink per
tracker the monitor supports, each logging into the run the trainer opened (W&B's
``wandb.run``, the training thread's MLflow and Trackio runs; TensorBoard into the
trainer's folder). A tracker the monitor does not support is named once in a warning; when
no sink is left, a :class:`~grpo_monitor.sinks.JSONLSink` writes into the trainer's output
folder and its path is printed: the monitor's numbers never go nowhere.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .base import Sink
from .registry import SPECS, TRACKERS, sink_for_tracker, sink_from_spec

#: Trackers with a sink (the registry's, :data:`grpo_monitor.sinks.registry.TRACKERS`). ``console`` and ``file``
#: are the trainer's own printing/logging: no sink, no warning.
SUPPORTED: tuple[str, ...] = tuple(TRACKERS)
SILENT: tuple[str, ...] = ("console", "file", "none", "codecarbon")
#: Where the fallback log goes, under the trainer's output folder (a name no Python package has).
FALLBACK_NAME = "grpo-monitor/monitor.jsonl"
#: The folder used instead when the trainer names no output folder (default: the working directory).
LOG_DIR_ENV = "GRPO_MONITOR_LOG_DIR"
_WARNED: set[str] = set()


def tracker_names(report_to: Any) -> list[str]:
    """A trainer's tracker setting as a list of lower-case names; ``"all"`` expands to the installed ones.

    >>> tracker_names("none"), tracker_names(["wandb", "MLflow"]), tracker_names(None)
    ([], ['wandb', 'mlflow'], [])
    """
    if report_to is None:
        return []
    values = [report_to] if isinstance(report_to, str) else list(report_to)
    names = [str(getattr(v, "value", v)).strip().lower() for v in values]
    if "all" in names:
        names = [n for n in names if n != "all"] + _installed()
    return [n for n in dict.fromkeys(names) if n and n != "none"]


def _installed() -> list[str]:
    """What ``report_to="all"`` means: transformers' list of installed integrations when it is loaded."""
    hf = sys.modules.get("transformers.integrations.integration_utils")
    if hf is not None and hasattr(hf, "get_available_reporting_integrations"):
        return list(hf.get_available_reporting_integrations())
    import importlib.util

    return [n for n, kind in TRACKERS.items() if importlib.util.find_spec(kind.backend or n) is not None]


def sinks_for_trackers(names: Iterable[str], *, framework: str, output_dir: str | os.PathLike | None = None,
                       tensorboard_dir: str | os.PathLike | None = None, fallback: bool = True) -> list[Sink]:
    """One sink per supported tracker in ``names``; a JSONL log in ``output_dir`` when none is left.

    ``framework`` names the trainer in the warnings; ``tensorboard_dir`` is the trainer's
    TensorBoard folder (default ``<output_dir>/runs``); ``output_dir`` defaults to the
    working directory. Unsupported names are warned once per process and name.
    """
    names = list(names)
    out: list[Sink] = [sink_for_tracker(name, output_dir, tensorboard_dir) for name in names if name in SUPPORTED]
    unsupported = [n for n in names if n not in SUPPORTED and n not in SILENT]
    if unsupported and not set(unsupported) <= _WARNED:
        _WARNED.update(unsupported)
        warnings.warn(f"grpo-monitor ({framework}): no sink for the tracker(s) {unsupported}; the monitor logs to "
                      f"{[n for n in names if n in SUPPORTED] or 'a JSONL file'} (supported: {list(SUPPORTED)})",
                      RuntimeWarning, stacklevel=3)
    if not out and fallback:
        out.append(fallback_sink(framework, output_dir))
    return out


def fallback_sink(framework: str, output_dir: str | os.PathLike | None) -> Sink:
    """A JSONL log at ``<output_dir>/grpo-monitor/monitor.jsonl``; its path printed (rank 0).

    Without ``output_dir``: under ``$GRPO_MONITOR_LOG_DIR``, else the working directory."""
    from ..step.distributed import rank_and_world
    from .jsonl import JSONLSink

    folder = output_dir or os.environ.get(LOG_DIR_ENV) or Path.cwd()
    path, refused = _owned_log_path(Path(folder) / FALLBACK_NAME)
    if rank_and_world()[0] == 0:
        why = f" ({refused}; a fresh private folder instead)" if refused else ""
        print(f"grpo-monitor ({framework}): no tracker to log into; writing the monitor's log to {path.resolve()}"
              f"{why} (read it with `grpo-monitor report {path.parent.resolve()}`)", file=sys.stderr, flush=True)
    return JSONLSink(path, private=True)


def _owned_log_path(path: Path) -> tuple[Path, str | None]:
    """``path`` when its folder is ours (made 0700 when missing) and the file, if any, a regular file of ours;
    else the same name in a fresh private temporary folder, and why (a folder or link another user planted
    in a shared working folder: :mod:`grpo_monitor.repro.private_files`)."""
    from ..repro.private_files import check_private, fallback_private_dir, private_dir

    try:
        private_dir(path.parent)
        if os.path.lexists(path):
            check_private(path, kind="file")
        return path, None
    except OSError as exc:  # UnsafePathError, or a folder we cannot create
        return fallback_private_dir("grpo-monitor-log-") / path.name, str(exc)


def sinks_from_specs(specs: Any) -> list[Sink | str]:
    """Sinks from spec strings (the registry's :data:`~grpo_monitor.sinks.registry.SPECS`: ``"jsonl:PATH"``,
    ``"tensorboard:DIR"``, ``"wandb"``, ...); ``"auto"`` stays the string ``"auto"``, resolved by the integration.

    >>> [type(s).__name__ if not isinstance(s, str) else s for s in sinks_from_specs(["auto", "jsonl:/tmp/m.jsonl"])]
    ['auto', 'JSONLSink']
    """
    if isinstance(specs, str) or not isinstance(specs, (list, tuple)):
        raise ValueError(f"sinks must be a list of sink specs such as {list(SPECS)}, but got {specs!r}")
    return [sink_from_spec(spec) for spec in specs]
