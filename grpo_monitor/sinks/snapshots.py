"""The files the JSONL sink keeps beside its log for scripts and agents watching a run, each replaced
atomically (written under a fresh name, then renamed: a reader never sees half a file):

- ``health.json``: the latest run-health verdict (status, findings with evidence and remedies, the
  ``grpo/health/*`` figures), rewritten every step that has one;
- ``questions.json``: every question's supply class (saturated, unsolved, learnable), for
  ``grpo-monitor questions RUN``; rewritten every ``questions_every`` steps (JSONLSink: 50) that changed it and at the end
  (10^5 questions: about 0.1 s per write, docs/health.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..files.writing import OutputDir
from ..health.export import CLASSES, HEALTH_FILE, QUESTIONS_FILE, snapshot_payload
from ..report import StepReport


def _nan_free(metrics: dict[str, float]) -> dict[str, float | None]:
    return {k: (v if v == v and abs(v) != float("inf") else None) for k, v in metrics.items()}


class RunSnapshots:
    """``health.json`` and ``questions.json`` in ``folder`` (see the module docstring)."""

    def __init__(self, folder: Path, questions_every: int = 10):
        if isinstance(questions_every, bool) or not isinstance(questions_every, int) or questions_every < 1:
            raise ValueError(f"Expected argument `questions_every` to be an int >= 1 but got {questions_every!r}")
        self.folder = folder
        self.questions_every = questions_every
        self._classes: dict[Any, str] | None = None  # loaded from an earlier snapshot on first use (a resume)
        self._dirty_since: int | None = None  # step of the first change not yet written
        self._step = -1

    def update(self, report: StepReport) -> None:
        """Write what ``report`` changes."""
        if report.health is not None:
            text = health_payload(report)
            with OutputDir(self.folder) as out:
                out.write(HEALTH_FILE, text)
        if report.question_classes:
            classes = self._known()
            classes.update(report.question_classes)
            self._step = report.step
            if self._dirty_since is None:
                self._dirty_since = report.step
            if report.step - self._dirty_since >= self.questions_every - 1 or report.failed:
                self.flush()

    def flush(self) -> None:
        """Write ``questions.json`` when it changed since it was last written."""
        if self._dirty_since is None or self._classes is None:
            return
        with OutputDir(self.folder) as out:
            out.write(QUESTIONS_FILE, snapshot_payload(self._classes, self._step))
        self._dirty_since = None

    def _known(self) -> dict[Any, str]:
        if self._classes is None:
            self._classes = _read_classes(self.folder / QUESTIONS_FILE)
        return self._classes


def health_payload(report: StepReport) -> str:
    """The ``health.json`` text of ``report``: its ``health`` verdict and ``grpo/health/*`` metrics (strict JSON:
    NaN and infinities as null)."""
    health = report.health
    record = {"step": report.step, "status": health.status, "status_name": health.status_name,
              **health.to_dict(), "metrics": _nan_free({k: v for k, v in report.metrics.items()
                                                        if k.startswith("grpo/health/")})}
    return json.dumps(record, allow_nan=False, default=str)


def _read_classes(path: Path) -> dict[Any, str]:
    """The classes of an earlier ``questions.json`` (empty when there is none or it is unreadable)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        classes = data["classes"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    out: dict[Any, str] = {}
    for name in CLASSES:
        for qid in classes.get(name, ()):
            out[tuple(qid) if isinstance(qid, list) else qid] = name
    return out
