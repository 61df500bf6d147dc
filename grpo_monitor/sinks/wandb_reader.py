"""Read a W&B run's ``.wandb`` file offline: history rows, summary, alerts, exit code.

W&B has no public offline reader. The file is a leveldb-style log, as in wandb's
``sdk/internal/datastore.py``: a 7-byte header (``":W&B"``, magic ``0xBEE1`` as uint16,
version 0 as uint8), then 32 KiB blocks of records. Each record has a 7-byte header,
crc32 (uint32, zlib's crc32 of the data seeded with the crc32 of the type byte), length
(uint16) and type (uint8: FULL=1, FIRST=2, MIDDLE=3, LAST=4), then its data; a block
tail shorter than 7 bytes is zero padding. The data of a FULL record, or of a
FIRST..MIDDLE*..LAST chain, is a serialized ``wandb.proto.wandb_internal_pb2.Record``.

A run still being written may end in an incomplete record: reading stops there.
"""

from __future__ import annotations

import json
import os
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HEADER = struct.Struct("<4sHB")
RECORD_HEADER = struct.Struct("<IHB")
BLOCK_LEN = 32768
IDENT, MAGIC, VERSION = b":W&B", 0xBEE1, 0
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
_TYPE_CRC = {t: zlib.crc32(bytes([t])) for t in (FULL, FIRST, MIDDLE, LAST)}


def _chunks(data: bytes, path: Any) -> Iterator[tuple[int, bytes]]:
    """(type, data) of each block record; stops at an incomplete trailing record."""
    index = HEADER.size
    while index < len(data):
        space_left = BLOCK_LEN - index % BLOCK_LEN
        if space_left < RECORD_HEADER.size:
            index += space_left
            continue
        if index + RECORD_HEADER.size > len(data):
            return
        checksum, length, rtype = RECORD_HEADER.unpack_from(data, index)
        if rtype not in _TYPE_CRC:
            raise ValueError(f"{path}: record at byte {index} has type {rtype}; expected 1..4")
        body = data[index + RECORD_HEADER.size : index + RECORD_HEADER.size + length]
        if len(body) < length:
            return
        if zlib.crc32(body, _TYPE_CRC[rtype]) != checksum:
            raise ValueError(f"{path}: record at byte {index} fails its crc32 check; the file is corrupt")
        index += RECORD_HEADER.size + length
        yield rtype, body


def _payloads(data: bytes, path: Any) -> Iterator[bytes]:
    """Reassembled record payloads (FULL, or FIRST+MIDDLE*+LAST)."""
    pending: bytes | None = None
    for rtype, body in _chunks(data, path):
        if rtype == FULL:
            yield body
        elif rtype == FIRST:
            pending = body
        elif pending is None:
            raise ValueError(f"{path}: record type {rtype} without a FIRST record before it")
        elif rtype == MIDDLE:
            pending += body
        else:
            yield pending + body
            pending = None


def read_wandb_records(path: str | os.PathLike) -> list:
    """Every ``Record`` proto in a ``.wandb`` file, in write order.

    Raises ``ValueError`` on a bad file header, a failed checksum or a record that does not parse.
    """
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    if len(data) < HEADER.size or HEADER.unpack_from(data) != (IDENT, MAGIC, VERSION):
        raise ValueError(
            f"{path}: expected a .wandb file starting with {IDENT!r}, magic {MAGIC:#x}, "
            f"version {VERSION}, but got {data[:HEADER.size]!r}"
        )
    from google.protobuf.message import DecodeError

    records = []
    for number, payload in enumerate(_payloads(data, path), 1):
        # the generated protobuf module re-exports its messages from a version-specific one (no stubs)
        record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
        try:
            record.ParseFromString(payload)
        except DecodeError as exc:  # a checksum that holds over bytes that are no Record: a hand-made file
            raise ValueError(f"{path}: record {number} is not a W&B record ({exc})") from None
        records.append(record)
    return records


def value_of(item: Any) -> Any:
    """The value of a history, summary or config item (its ``value_json``).

    A value nested too deep, a number out of range or text that is not JSON (a damaged or
    hand-made file) is an ``InputFileError`` (a ``ValueError``) naming the item's key.
    """
    from ..files.reading import InputFileError, loads

    key = "/".join(item.nested_key) or item.key
    try:
        return loads(item.value_json, f"the W&B item {key!r}")
    except json.JSONDecodeError as exc:
        raise InputFileError(f"the W&B item {key!r}: its value is not JSON ({exc.msg})") from None


def _items_to_dict(items) -> dict[str, Any]:
    """History/summary items (``key`` or ``nested_key`` + ``value_json``) as a nested dict."""
    out: dict[str, Any] = {}
    for item in items:
        path = list(item.nested_key) or [item.key]
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value_of(item)
    return out


def _of_type(records: list, kind: str) -> list:
    return [r for r in records if r.WhichOneof("record_type") == kind]


def history_rows(records: list) -> list[dict[str, Any]]:
    """One dict per ``run.log`` row; NaN/inf come back as floats, media as nested dicts (a damaged value: see
    :func:`value_of`)."""
    return [_items_to_dict(r.history.item) for r in _of_type(records, "history")]


def summary(records: list) -> dict[str, Any]:
    """The run summary: every summary update applied in order, removals honoured."""
    out: dict[str, Any] = {}
    for record in _of_type(records, "summary"):
        _merge(out, _items_to_dict(record.summary.update))
        for item in record.summary.remove:
            path = list(item.nested_key) or [item.key]
            node = out
            for part in path[:-1]:
                node = node.get(part, {})
            node.pop(path[-1], None)
    return out


def _merge(into: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def alerts(records: list) -> list[dict[str, Any]]:
    """Every ``run.alert`` as ``{"title", "text", "level"}``."""
    return [
        {"title": r.alert.title, "text": r.alert.text, "level": r.alert.level}
        for r in _of_type(records, "alert")
    ]


def metric_definitions(records: list) -> list[dict[str, Any]]:
    """Every ``define_metric`` as ``{"name", "glob_name", "step_metric", "summary"}``."""
    out = []
    for r in _of_type(records, "metric"):
        m = r.metric
        chosen = [f.name for f, on in m.summary.ListFields() if on is True]
        out.append({"name": m.name, "glob_name": m.glob_name, "step_metric": m.step_metric, "summary": chosen})
    return out


def exit_code(records: list) -> int | None:
    """The run's exit code, or None while the run has not finished."""
    exits = _of_type(records, "exit")
    return exits[-1].exit.exit_code if exits else None


def wait_for_exit(path: str | os.PathLike, timeout: float = 30.0) -> list:
    """The records of ``path`` once its exit record is written (``run.finish()`` can
    return before W&B's service flushes the file); ``TimeoutError`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        records = read_wandb_records(path) if Path(path).exists() else []
        if exit_code(records) is not None:
            return records
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path}: no exit record after {timeout} s; did the run call finish()?")
        time.sleep(0.05)


def load_table(wandb_path: str | os.PathLike, ref: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows (dicts by column) of a ``wandb.Table`` that a history row references.

    ``ref`` is the row's value for the table key (``{"_type": "table-file", "path": ...}``);
    the table file lies under ``files/`` next to the ``.wandb`` file.
    """
    if not isinstance(ref, dict) or "path" not in ref:
        raise ValueError(f"expected a table reference with a 'path' entry, but got {ref!r}")
    table = json.loads((Path(wandb_path).parent / "files" / ref["path"]).read_text())
    return [dict(zip(table["columns"], row, strict=False)) for row in table["data"]]
