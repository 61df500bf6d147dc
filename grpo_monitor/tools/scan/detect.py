"""Which reader fits a path: format detection from the files themselves.

- a folder of ``<step>.jsonl`` files whose rows hold ``input`` and ``score``: **verl**;
- an offline W&B run folder (``files/media/table/completions_*.table.json``), or a folder
  holding exactly one such run (``wandb/offline-run-*``): **trl-wandb**;
- TRL's ``completions/completions_<step>.parquet`` (or the output folder above it): **trl-parquet**;
- other ``*.parquet``: **parquet**; other ``*.jsonl``: **jsonl**.

>>> FORMATS
('auto', 'verl', 'trl-wandb', 'trl-parquet', 'jsonl', 'parquet')
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from ...files.reading import check_regular
from .columns import ColumnMap, ScanInputError
from .readers import JsonlReader, VerlReader, first_record

FORMATS = ("auto", "verl", "trl-wandb", "trl-parquet", "jsonl", "parquet")
_RUN_GLOBS = ("offline-run-*", "run-*")


def wandb_run_folder(path: Path) -> Path | None:
    """The W&B run folder ``path`` is, or holds (directly or under ``wandb/``); None when there is none.

    Several runs are a worded error naming them: the scan reads one run.
    """
    if (path / "files" / "media" / "table").is_dir() or any(path.glob("run-*.wandb")):
        return path
    for base in (path, path / "wandb"):
        runs = sorted({p for g in _RUN_GLOBS for p in base.glob(g) if p.is_dir() and not p.is_symlink()})
        runs = [r for r in runs if (r / "files" / "media" / "table").is_dir()]
        if len(runs) == 1:
            return runs[0]
        if len(runs) > 1:
            names = ", ".join(str(r) for r in runs[:5])
            raise ScanInputError(f"{base} holds {len(runs)} W&B runs with tables ({names}); "
                                 "pass the run folder to scan")
    return None


def _verl_like(files: list[Path], folder: Path | None = None) -> bool:
    _, record = first_record(files[0], folder)
    return isinstance(record, dict) and "input" in record and "score" in record


def detect_format(path: str | Path) -> str:
    """The format of ``path`` (one of :data:`FORMATS` but ``auto``), or a worded :class:`ScanInputError`."""
    p = Path(path)
    if not p.exists():
        raise ScanInputError(f"{p}: no such file or folder")
    if not p.is_dir():
        check_regular(p)  # a FIFO or a device is refused here, never opened for reading
        return _file_format(p)
    step_files = sorted((int(f.stem), f) for f in p.glob("*.jsonl") if f.stem.isdigit())
    if step_files and _verl_like([f for _, f in step_files], p):
        return "verl"
    if wandb_run_folder(p) is not None:
        return "trl-wandb"
    if any((p / "completions").glob("completions_*.parquet")) or any(p.glob("completions_*.parquet")):
        return "trl-parquet"
    if any(p.glob("*.parquet")):
        return "parquet"
    if any(p.glob("*.jsonl")):
        return "jsonl"
    raise ScanInputError(
        f"{p}: found no recorded rollouts: expected verl's <step>.jsonl dumps, an offline W&B run with TRL's "
        "completions tables, TRL's completions/*.parquet, or *.jsonl / *.parquet files of (step, group, reward)"
    )


def _file_format(p: Path) -> str:
    name = p.name
    if name.endswith(".parquet"):
        return "trl-parquet" if name.startswith("completions_") and _trl_columns(p) else "parquet"
    if name.endswith(".jsonl"):
        return "verl" if p.stem.isdigit() and _verl_like([p]) else "jsonl"
    raise ScanInputError(f"{p}: cannot tell the format of this file (expected .jsonl or .parquet); "
                         "pass its folder, or --format")


def _trl_columns(p: Path) -> bool:
    if importlib.util.find_spec("pyarrow") is None:
        return False
    from .parquet import open_parquet

    names = set(open_parquet(p).schema_arrow.names)
    return {"step", "prompt", "completion", "advantage"} <= names


def open_reader(path: str | Path, fmt: str = "auto", columns: ColumnMap = ColumnMap(),
                group_size: int | None = None) -> Any:
    """The reader of ``path`` in ``fmt`` (``auto``: :func:`detect_format`)."""
    if fmt not in FORMATS:
        raise ScanInputError(f"format must be one of {', '.join(FORMATS)}, but got {fmt!r}")
    p = Path(path)
    fmt = detect_format(p) if fmt == "auto" else fmt
    if not p.exists():
        raise ScanInputError(f"{p}: no such file or folder")
    if fmt == "verl":
        return VerlReader(p, columns)
    if fmt == "jsonl":
        return JsonlReader(p, columns, group_size)
    if fmt == "parquet":
        from .parquet import ParquetReader

        return ParquetReader(p, columns, group_size)
    from .trl_tables import TrlTableReader

    if fmt == "trl-wandb":
        run = wandb_run_folder(p) if p.is_dir() else None
        if run is None:
            raise ScanInputError(f"{p}: not an offline W&B run folder (expected files/media/table/ or run-*.wandb)")
        return TrlTableReader(run, fmt, columns)
    return _one_parquet(p, columns) if p.is_file() else TrlTableReader(p, fmt, columns)


def _one_parquet(p: Path, columns: ColumnMap) -> Any:
    from .trl_tables import TrlTableReader

    reader = TrlTableReader(p.parent, "trl-parquet", columns)
    reader.source, reader.files, reader.total = p, [p], p.stat().st_size
    return reader

