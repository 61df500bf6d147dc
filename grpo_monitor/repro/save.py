"""Save the tensors of a breach so it can be reproduced offline, in the one repro file format.

The format is :class:`SavedRollout` (one per ``observe_rollout`` call: everything the live
check used, token counts, reward components, group and question ids and the group layout
included) plus the step, the config, the broken invariants and the estimator lock the run had
reached (``FORMAT`` numbers it). Token tensors are not in it: the monitor sums them on the
device and keeps none, so a token-side breach's file holds the step's config and rollouts
(its message says so). Loading and replaying live in :mod:`grpo_monitor.repro.replay` (which
imports the monitor); both read the format from here. The step package never imports this one (it reads the
step's records); :func:`grpo_monitor.run.breach.with_repro` calls it for the monitor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..config import MonitorConfig
from ..step.inputs import plain_state
from .private_files import create_private_file, user_private_dir

#: Version of the repro file format (2: lengths, question ids and the estimator lock saved;
#: 3: reward components and weights, the group ids as given and the block layout).
FORMAT = 3


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


@dataclasses.dataclass(frozen=True)
class SavedRollout:
    """One ``observe_rollout`` call as saved: the arguments the live check was given, on the CPU.

    ``group_labels`` are the group ids as given (plain values; ``labelled`` marks files that
    keep them, format 3), so a replay names the groups as the live check did; ``blocks`` is
    ``G`` when the rows were contiguous groups of ``G`` (``(B, G)`` rewards or
    ``config.group_size``), so a replay reduces them the same way.
    """

    rewards: torch.Tensor
    group_index: torch.Tensor
    group_labels: list[Any]
    advantages: torch.Tensor | None
    lengths: torch.Tensor | None = None
    question_ids: list[Any] | None = None
    components: torch.Tensor | None = None  # (N, K) reward components: a multi-reward estimator's inputs
    weights: tuple[float, ...] | None = None
    blocks: int | None = None
    labelled: bool = False

    @staticmethod
    def of(record: Any) -> SavedRollout:
        """From an accumulator's ``RolloutRecord`` (block layouts label their groups with a ``range``)."""
        n, labels = len(record.rewards), record.labels
        return SavedRollout(
            rewards=record.rewards.detach().cpu(), group_index=record.gid.detach().cpu(),
            group_labels=plain_state(list(labels)), advantages=_cpu(record.advantages),
            lengths=_cpu(record.lengths),
            question_ids=None if record.questions is None else plain_state(list(record.questions)),
            components=_cpu(record.components), weights=record.weights,
            blocks=n // len(labels) if isinstance(labels, range) and len(labels) else None, labelled=True,
        )

    def observe_args(self) -> dict[str, Any]:
        """The keyword arguments that feed it to ``GRPOMonitor.observe_rollout`` again (rewards included)."""
        args = dict(advantages=self.advantages, lengths=self.lengths, question_ids=self.question_ids,
                    reward_components=self.components, reward_weights=self.weights)
        if self.blocks:
            return dict(args, rewards=self.rewards.reshape(-1, self.blocks))
        return dict(args, rewards=self.rewards, group_ids=self._group_ids())

    def _group_ids(self) -> Any:
        """Ids whose factorization gives back ``group_index`` and ``group_labels`` as the live check had them."""
        if not self.labelled:  # format 1 and 2: labels were saved as strings
            return self.group_index
        per_row = [self.group_labels[g] for g in self.group_index.tolist()]
        ints = all(type(x) is int for x in self.group_labels)
        if ints and self.group_labels == sorted(self.group_labels):  # a tensor of ids: unique sorts them
            return torch.tensor(per_row, dtype=torch.int64)
        return per_row  # a list of ids: numbered in order of first appearance

    @staticmethod
    def load(saved: dict[str, Any]) -> SavedRollout:
        """From the plain dict a file holds (format 1 files have no lengths or question ids, format 2 no
        reward components and group ids as strings)."""
        fields = {f.name for f in dataclasses.fields(SavedRollout)}
        return SavedRollout(**{k: v for k, v in saved.items() if k in fields})


def _cpu(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().cpu()


def save_repro(config: MonitorConfig, step: int, state: Any, violations: Sequence[Any],
               lock: dict[str, Any] | None = None) -> tuple[str | None, str | None]:
    """Write the step's rollouts (:class:`SavedRollout`) and the estimator ``lock`` to a ``.pt`` file.

    Returns ``(path, None)``, or ``(None, reason)`` when saving failed for any reason (a full
    disk, a folder of another user, a file in the way): the dump must never hide the breach.
    The file is new (``O_EXCL | O_NOFOLLOW``, mode 0600): an existing name, a planted symlink
    included, is never opened; the next free ``-N`` suffix is taken instead.
    """
    try:
        payload = _payload(config, step, state, violations, lock)
        folder = Path(repro_dir(config))
        if not folder.is_dir():
            folder.mkdir(mode=0o700, parents=True)
        return _write_new(folder, f"step{step:06d}-pid{os.getpid()}", payload), None
    except Exception as exc:  # noqa: BLE001 - any failure: report it in the breach message
        return None, f"{type(exc).__name__}: {exc}"[:300]


def _payload(config: MonitorConfig, step: int, state: Any, violations: Sequence[Any],
             lock: dict[str, Any] | None) -> dict[str, Any]:
    rollouts = [dataclasses.asdict(SavedRollout.of(r)) for r in state.rollouts]
    return {"format": FORMAT, "step": step, "config": config.model_dump(),
            "invariants": [v.invariant for v in violations], "rollouts": rollouts, "estimator_lock": lock}


def _write_new(folder: Path, stem: str, payload: dict[str, Any]) -> str:
    """``torch.save`` into the first free ``stem[-N].pt`` of ``folder``, created private."""
    for n in range(_MAX_SUFFIX):
        path = folder / (f"{stem}.pt" if n == 0 else f"{stem}-{n}.pt")
        try:
            fd = create_private_file(path)
        except FileExistsError:
            continue
        f = os.fdopen(fd, "wb")
        try:
            torch.save(payload, f)
            f.close()
        except BaseException:
            with contextlib.suppress(OSError):  # flushing the rest fails too: the first failure is the one named
                f.close()
            path.unlink(missing_ok=True)
            raise
        return str(path)
    raise FileExistsError(f"{folder} already holds {_MAX_SUFFIX} files named {stem}*.pt")


_MAX_SUFFIX = 100
