"""Save the tensors of a breach so it can be reproduced offline.

Loading and replaying a saved file live in :mod:`grpo_monitor.repro.replay` (which imports the
monitor; the monitor imports this module).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..config import MonitorConfig
from .private_files import create_private_file, user_private_dir


def repro_dir(config: MonitorConfig) -> str:
    """Where breach files go: ``config.repro_dir``, else the per-user private folder.

    The default is ``<tmp>/grpo-monitor-repro-<uid>``, created 0700 and used only while it
    is owned by the current user and writable by nobody else; when another user got there
    first, a fresh private folder is made instead (see :mod:`grpo_monitor.repro.private_files`).
    """
    if config.repro_dir:
        return config.repro_dir
    folder, why = user_private_dir("grpo-monitor-repro")
    if why:
        warnings.warn(f"grpo-monitor: {why}; breach files go to the fresh private folder {folder}", RuntimeWarning,
                      stacklevel=1)
    return str(folder)


def save_repro(config: MonitorConfig, step: int, state: Any,
               violations: Sequence[Any]) -> tuple[str | None, str | None]:
    """Write the step's rollouts (rewards, group index, labels, advantages) to a ``.pt`` file.

    Returns ``(path, None)``, or ``(None, reason)`` when saving failed for any reason (a full
    disk, a folder of another user, a file in the way): the dump must never hide the breach.
    The file is new (``O_EXCL | O_NOFOLLOW``, mode 0600): an existing name, a planted symlink
    included, is never opened; the next free ``-N`` suffix is taken instead.
    """
    try:
        payload = _payload(config, step, state, violations)
        folder = Path(repro_dir(config))
        if not folder.is_dir():
            folder.mkdir(mode=0o700, parents=True)
        return _write_new(folder, f"step{step:06d}-pid{os.getpid()}", payload), None
    except Exception as exc:  # noqa: BLE001 - any failure: report it in the breach message
        return None, f"{type(exc).__name__}: {exc}"[:300]


def _payload(config: MonitorConfig, step: int, state: Any, violations: Sequence[Any]) -> dict[str, Any]:
    rollouts = [
        {
            "rewards": r.rewards.detach().cpu(),
            "group_index": r.gid.detach().cpu(),
            "group_labels": [str(x) for x in r.labels],
            "advantages": None if r.advantages is None else r.advantages.detach().cpu(),
        }
        for r in state.rollouts
    ]
    return {"step": step, "config": config.model_dump(), "invariants": [v.invariant for v in violations],
            "rollouts": rollouts}


def _write_new(folder: Path, stem: str, payload: dict[str, Any]) -> str:
    """``torch.save`` into the first free ``stem[-N].pt`` of ``folder``, created private."""
    for n in range(_MAX_SUFFIX):
        path = folder / (f"{stem}.pt" if n == 0 else f"{stem}-{n}.pt")
        try:
            fd = create_private_file(path)
        except FileExistsError:
            continue
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(payload, f)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return str(path)
    raise FileExistsError(f"{folder} already holds {_MAX_SUFFIX} files named {stem}*.pt")


_MAX_SUFFIX = 100
