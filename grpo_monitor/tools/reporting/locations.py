"""Where else a run's numbers are: the JSONL log, TensorBoard events and W&B runs next to it.

Only what exists is listed. TensorBoard: the log's folder or a subfolder (at most three
levels down, ``wandb/`` excluded) holding ``events.out.tfevents*`` files. W&B: a ``wandb/``
folder next to the log holding ``run-*`` or ``offline-run-*`` folders.

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> _ = (folder / "monitor.jsonl").write_text("")
>>> [loc.kind for loc in where_else(folder / "monitor.jsonl")]
['JSONL log']
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

EVENTS_GLOB = "events.out.tfevents*"
#: Folders never searched for TensorBoard events (W&B copies them under its own run folders).
_SKIP = ("wandb", "plots", "repro", ".git", "__pycache__")


@dataclasses.dataclass(frozen=True)
class Location:
    """One place holding the run's data: what it is, its path, and how to open it."""

    kind: str
    path: Path
    how: str


def where_else(log: Path) -> list[Location]:
    """The JSONL log, then every TensorBoard folder, W&B run, repro folder and demo file next to it."""
    folder = log.parent
    found = [Location("JSONL log", log.resolve(), "one StepReport per line; this page is built from it")]
    found += [Location("TensorBoard", path.resolve(), f"tensorboard --logdir {path.resolve()}")
              for path in tensorboard_folders(folder)]
    found += wandb_runs(folder / "wandb")
    repro = folder / "repro"
    if repro.is_dir() and any(repro.iterdir()):
        found.append(Location("Repro files", repro.resolve(),
                              "offending tensors of each breach: grpo_monitor.load_repro(path) or "
                              "grpo_monitor.replay(path)"))
    for name, kind, how in (("theory.jsonl", "Demo theory",
                             "what the demo policy's own probabilities predict, per step"),
                            ("run.json", "Run settings", "the settings the run was started with")):
        if (folder / name).is_file():
            found.append(Location(kind, (folder / name).resolve(), how))
    return found


def tensorboard_folders(folder: Path, depth: int = 3) -> list[Path]:
    """Folders at most ``depth`` levels under ``folder`` (itself included) that hold TensorBoard event files."""
    found = []
    for root, dirs, files in os.walk(folder):
        level = len(Path(root).relative_to(folder).parts)
        dirs[:] = sorted(d for d in dirs if d not in _SKIP and level < depth)
        if any(Path(f).match(EVENTS_GLOB) for f in files):
            found.append(Path(root))
            dirs[:] = []  # one entry per event folder; its subfolders are the same TensorBoard view
    return found


def wandb_runs(folder: Path) -> list[Location]:
    """Each W&B run folder (``run-*``, ``offline-run-*``) under ``folder``, newest last."""
    if not folder.is_dir():
        return []
    runs = sorted((p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()
                   and p.name.startswith(("run-", "offline-run-"))), key=_started)
    out = []
    for run in runs:
        run_id = run.name.rsplit("-", 1)[-1]
        if run.name.startswith("offline-"):
            out.append(Location("W&B offline run", run.resolve(), f"upload it with: wandb sync {run.resolve()}"))
        else:
            out.append(Location("W&B run", run.resolve(), f"synced online; run id {run_id} in your W&B project"))
    return out


def _started(run: Path) -> str:
    """The start time W&B puts in a run folder's name (``run-20250101_120000-<id>``), else the name."""
    found = re.search(r"\d{8}_\d{6}", run.name)
    return found.group(0) if found else run.name
