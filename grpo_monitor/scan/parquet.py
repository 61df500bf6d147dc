"""Generic Parquet records (one row per response), read in record batches through ``pyarrow``.

The field names are inferred as for generic JSONL (``step``, a group or prompt column, a
reward, optionally an advantage and a question) or given with ``--columns``. A folder is
read file by file in name order; rows of a step must be contiguous. Memory holds one
record batch and one step.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


class ParquetReader:
    """Generic Parquet: one row per response, steps one after another."""

    format = "parquet"
    unit = "rows"

    def __init__(self, path: str | Path, columns: ColumnMap = ColumnMap(), group_size: int | None = None):
        pq = _require_pyarrow()
        self.source = Path(path)
        self.files = parquet_files(self.source)
        meta = [pq.ParquetFile(p).metadata for p in self.files]
        self.total = sum(m.num_rows for m in meta)
        self.notes: list[str] = []
        self.declared: dict[str, Any] = {}
        names = pq.ParquetFile(self.files[0]).schema_arrow.names
        self.columns = generic_columns(names, columns, self.files[0], 1, "parquet", group_size)
        for path_, m in zip(self.files[1:], meta[1:], strict=True):
            missing = [n for n in self._needed() if n not in pq.ParquetFile(path_).schema_arrow.names]
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

    def _read_file(self, path: Path, buf: RowBuffer) -> Iterator[StepRows]:
        pq = _require_pyarrow()
        needed = self._needed()
        row = 1
        for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS, columns=needed):
            data = {n: batch.column(n).to_pylist() for n in needed}
            if self.columns.group is not None:
                data[self.columns.group] = _hashable(data[self.columns.group])
            lines = range(row, row + batch.num_rows)
            yield from buf.feed(data, self.columns, str(path), lines, batch.num_rows)
            row += batch.num_rows


def _hashable(values: list[Any]) -> list[Any]:
    """Group keys as hashable values (a list or struct cell, e.g. chat messages, as its repr)."""
    return [v if isinstance(v, (str, int, float, bytes, type(None))) else repr(v) for v in values]
