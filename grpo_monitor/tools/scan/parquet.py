"""Generic Parquet records (one row per response), read in record batches through ``pyarrow``.

The field names are inferred as for generic JSONL (``step``, a group or prompt column, a
reward, optionally an advantage and a question) or given with ``--columns``. A folder is
read file by file in name order; rows of a step must be contiguous. Memory holds one
record batch and one step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...files.reading import InputFileError, open_input
from .columns import ColumnMap, ScanInputError
from .readers import generic_columns, natural_key
from .rows import RowBuffer, StepRows

BATCH_ROWS = 65_536


def parquet_files(path: Path) -> list[Path]:
    """``path`` itself, or the ``*.parquet`` files of a folder in natural name order."""
    if path.is_file():
        return [path]
    files = sorted(path.glob("*.parquet"), key=natural_key)
    if not files:
        raise ScanInputError(f"{path}: no *.parquet file in this folder")
    return files


def _require_pyarrow() -> Any:
    try:
        import pyarrow.parquet as pq
    except ModuleNotFoundError as exc:
        raise ScanInputError("reading Parquet needs pyarrow; install it with `pip install grpo-monitor[scan]`") from exc
    return pq


def open_parquet(path: Path, folder: Path | None = None) -> Any:
    """``pyarrow.parquet.ParquetFile`` of a regular file (inside ``folder`` when given); a damaged or empty file,
    or one with two columns of one name, is a worded :class:`ScanInputError` naming it."""
    pq = _require_pyarrow()
    handle = open_input(path, folder)
    try:
        parquet = pq.ParquetFile(handle)
    except Exception as exc:  # pyarrow's ArrowInvalid / ArrowIOError / OSError: the file is not Parquet
        handle.close()
        raise ScanInputError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {exc})") from None
    names = parquet.schema_arrow.names
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        handle.close()
        raise ScanInputError(f"{path}: the column {twice[0]!r} appears twice; a scan cannot tell which one to read "
                             "(rename one when writing the file)")
    return parquet


@contextlib.contextmanager
def arrow_errors(path: Path) -> Iterator[None]:
    """Inside the block, pyarrow's errors while reading ``path`` become a :class:`ScanInputError` naming it."""
    try:
        yield
    except InputFileError:
        raise
    except Exception as exc:  # ArrowInvalid, ArrowIOError, OSError: pyarrow's view of a damaged file
        if not (type(exc).__module__.startswith("pyarrow") or isinstance(exc, OSError)):
            raise
        raise ScanInputError(f"{path}: a damaged Parquet file ({type(exc).__name__}: {exc})") from None


class ParquetReader:
    """Generic Parquet: one row per response, steps one after another."""

    format = "parquet"
    unit = "rows"

    def __init__(self, path: str | Path, columns: ColumnMap = ColumnMap(), group_size: int | None = None):
        self.source = Path(path)
        self.files = parquet_files(self.source)
        self.folder = self.source if self.source.is_dir() else None
        opened = [open_parquet(p, self.folder) for p in self.files]
        meta = [f.metadata for f in opened]
        self.total = sum(m.num_rows for m in meta)
        self.notes: list[str] = []
        self.declared: dict[str, Any] = {}
        names = opened[0].schema_arrow.names
        self.columns = generic_columns(names, columns, self.files[0], 1, "parquet", group_size)
        for path_, m, f in zip(self.files[1:], meta[1:], opened[1:], strict=True):
            missing = [n for n in self._needed() if n not in f.schema_arrow.names]
            if missing and m.num_rows:
                raise ScanInputError(f"{path_}, row 1: no column {missing[0]!r} (parquet format), unlike "
                                     f"{self.files[0].name}; every file of the folder needs the same columns")

    def _needed(self) -> list[str]:
        c = self.columns
        names = [c.step, *c.reward, c.group, c.advantage, c.question]
        return list(dict.fromkeys(n for n in names if n is not None))

    def steps(self) -> Iterator[StepRows]:
        c = self.columns
        buf = RowBuffer(c.reward, c.group is not None, c.question is not None, c.advantage is not None, unit="row")
        for path in self.files:
            yield from self._read_file(path, buf)
        last = buf.finish()
        if last is not None:
            yield last
        note = buf.skipped_note(c.step)
        if note:
            self.notes.append(note)

    def _read_file(self, path: Path, buf: RowBuffer) -> Iterator[StepRows]:
        needed = self._needed()
        row = 1
        batches = open_parquet(path, self.folder).iter_batches(batch_size=BATCH_ROWS, columns=needed)
        while True:
            with arrow_errors(path):
                batch = next(batches, None)
                if batch is None:
                    return
                data = {n: batch.column(n).to_pylist() for n in needed}
            if self.columns.group is not None:
                data[self.columns.group] = _hashable(data[self.columns.group])
            lines = range(row, row + batch.num_rows)
            yield from buf.feed(data, self.columns, str(path), lines, batch.num_rows)
            row += batch.num_rows


def _hashable(values: list[Any]) -> list[Any]:
    """Group keys as hashable values (a list or struct cell, e.g. chat messages, as its repr)."""
    return [v if isinstance(v, (str, int, float, bytes, type(None))) else repr(v) for v in values]
