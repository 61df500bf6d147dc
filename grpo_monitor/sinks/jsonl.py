"""JSON Lines: one object per step, crash-safe, readable with the standard library.

Encoding: each line is ``json.dumps(report.to_dict(), allow_nan=True)``, so non-finite
floats are written as the bare tokens ``NaN``, ``Infinity`` and ``-Infinity``. Python's
``json`` module (and :func:`read_jsonl`) reads them back as floats; strict JSON parsers
such as ``jq`` need them replaced first (``sed 's/-\\?Infinity\\|NaN/null/g'``).
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from ..report import StepReport
from .base import Sink
from .snapshots import RunSnapshots


def _default(value: Any) -> Any:
    """JSON fallback for numpy/torch scalars and arrays; anything else becomes its str()."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def encode_line(record: dict[str, Any]) -> bytes:
    """One JSONL line (UTF-8, newline-terminated) with NaN/inf as bare tokens.

    >>> encode_line({"step": 1, "x": float("nan")})
    b'{"step": 1, "x": NaN}\\n'
    """
    return (json.dumps(record, allow_nan=True, default=_default) + "\n").encode("utf-8")


class JSONLSink(Sink):
    """Appends ``report.to_dict()`` as one line per step to ``path``.

    The whole line goes out in one ``os.write`` on a file opened with ``O_APPEND``, then
    ``os.fsync`` when ``fsync`` is true, so a ``kill -9`` loses no step whose ``log_report``
    returned, and at worst leaves a torn final line, which :func:`read_jsonl` skips. The
    sink is ``synchronous``: the :class:`~grpo_monitor.sinks.SinkSet` calls it in the
    training thread, so that guarantee holds when ``end_step`` returns.

    Torn tails are repaired before the next write, two ways. When the file already ends in
    a torn line on opening (a crash, then a resume), a newline is written first: those
    bytes are another process's evidence, kept for :func:`read_jsonl` to report. After a
    write of this sink failed (disk full, file size limit, I/O error), the file is cut back
    to the end of its last complete line before the next write: the torn bytes can only be
    the failed record's own prefix, which can never be completed, and ending them with a
    newline instead would leave a line in the middle of the file that strict JSON Lines
    readers (``jq``, ``pandas.read_json(lines=True)``) reject. A transient failure thus
    loses at most the step that failed, and the file stays valid line by line.
    """

    name = "jsonl"
    synchronous = True

    def __init__(self, path: str | os.PathLike, fsync: bool = True, questions_every: int = 50):
        self.path = Path(path)
        self.fsync = bool(fsync)
        self._fd: int | None = None
        self._torn = False  # the last write failed: the file may end in its partial line
        self.snapshots = RunSnapshots(self.path.parent, questions_every)

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                if not self._torn and _ends_torn(fd):
                    _write_all(fd, b"\n")
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
        if self._torn:
            _cut_torn_tail(self._fd)
            self._torn = False
        return self._fd

    def log_report(self, report: StepReport) -> None:
        """The step's line, then ``health.json`` (each step with a health verdict) and ``questions.json``."""
        self.write_record(report.to_dict())
        self.snapshots.update(report)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.write_record({"step": step, "metrics": metrics})

    def write_record(self, record: dict[str, Any]) -> None:
        """Append one record as one line; durable on return when ``fsync`` is true."""
        fd = self._open()
        try:
            _write_all(fd, encode_line(record))
            if self.fsync:
                os.fsync(fd)
        except BaseException:
            self._torn = True
            raise

    def finish(self, failed: bool = False) -> None:
        self.snapshots.flush()
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _ends_torn(fd: int) -> bool:
    """Whether the file behind ``fd`` is non-empty and does not end in a newline."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def _complete_size(fd: int, chunk: int = 1 << 16) -> int:
    """The length of the file behind ``fd`` up to and including its last newline (0 if none)."""
    end = os.fstat(fd).st_size
    while end > 0:
        start = max(0, end - chunk)
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def _cut_torn_tail(fd: int) -> None:
    """Truncate the file behind ``fd`` to its last complete line (drops a failed write's bytes)."""
    size = _complete_size(fd)
    if size < os.fstat(fd).st_size:
        os.ftruncate(fd, size)


def _write_all(fd: int, data: bytes) -> None:
    """One ``os.write`` of ``data``; the loop only runs on a short write (disk full, signal)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a JSONL file written by :class:`JSONLSink`, in order.

    A line that is not valid JSON (a torn write from a crash) is skipped with a
    ``RuntimeWarning`` naming its line number; ``NaN``/``Infinity`` read back as floats.
    """
    records: list[dict[str, Any]] = []
    lines = Path(path).read_bytes().split(b"\n")
    last = len(lines) - 1
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            records.append(json.loads(raw.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            where = "torn final line" if number - 1 == last else "unreadable line"
            warnings.warn(
                f"read_jsonl: skipped {where} {number} of {path} ({len(raw)} bytes, "
                f"likely a write interrupted by a crash): {exc}",
                RuntimeWarning,
                stacklevel=2,
            )
    return records
