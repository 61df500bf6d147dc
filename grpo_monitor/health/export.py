"""The question export: which questions were saturated, unsolved or learnable across their sightings, read from
the ``questions.json`` snapshot the JSONL sink keeps beside its log, as ids ready for a dataset filter.

>>> import json, tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = (folder / QUESTIONS_FILE).write_text(json.dumps({"version": 1, "step": 3, "classes": {
...     "saturated": ["q1"], "unsolved": [], "learnable": ["q2"]}}))
>>> questions(folder, "saturated")
['q1']
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

#: The snapshots the JSONL sink writes beside its log (each replaced atomically).
HEALTH_FILE = "health.json"
QUESTIONS_FILE = "questions.json"
#: The classes of a question across its sightings.
CLASSES = ("saturated", "unsolved", "learnable")


def run_folder(run: str | os.PathLike) -> Path:
    """The folder of a run: ``run`` itself when a folder, else the folder of its JSONL log."""
    path = Path(run)
    if path.is_dir():
        return path
    if path.exists():
        return path.parent
    raise FileNotFoundError(f"run must be a grpo-monitor JSONL log or the folder holding it, but {str(path)!r} "
                            "does not exist")


def snapshot(run: str | os.PathLike) -> dict[str, Any]:
    """The run's ``questions.json`` (``{"version", "step", "classes": {class: [ids]}}``)."""
    path = run_folder(run) / QUESTIONS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: the run was not logged with a JSONL sink, or its rollouts "
                                "had no question ids (observe_rollout(question_ids=...); TRL passes its prompts)")
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("classes"), dict):
        raise ValueError(f"{path} is not a questions snapshot (expected an object with 'classes')")
    return data


def questions(run: str | os.PathLike, which: str = "saturated") -> list[Any]:
    """The ids of the run's questions in class ``which`` ("saturated": every sighting at the top reward,
    "unsolved": every sighting at the bottom, "learnable": any other), in first-seen order.

    Drop the saturated ones from the dataset, e.g. ``dataset.filter(lambda r: r["prompt"] not in set(ids))``
    for TRL (whose question ids are the prompts)."""
    if which not in CLASSES:
        raise ValueError(f"Expected argument `which` to be one of {CLASSES} but got {which!r}")
    return list(snapshot(run)["classes"].get(which, []))


def snapshot_payload(classes: dict[Any, str], step: int) -> str:
    """The ``questions.json`` text for ``classes`` (id -> class) at ``step``."""
    grouped: dict[str, list[Any]] = {c: [] for c in CLASSES}
    for qid, cls in classes.items():
        grouped[cls].append(list(qid) if isinstance(qid, tuple) else qid)
    return json.dumps({"version": 1, "step": step, "classes": grouped}, default=str)
