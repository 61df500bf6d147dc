"""TensorBoard event files read record by record, every byte accounted for (``scan --metrics``).

An event file is a TFRecord stream: each record is its length (uint64, little-endian), the
masked CRC-32C of those 8 bytes, the data, and the masked CRC-32C of the data; the data is a
serialized ``tensorboard`` ``Event``. TensorBoard's own loader stops at the first damaged
record without a word, so a file damaged in the middle lost every later step silently.
Here:

- a damaged record (a checksum that fails) is skipped up to the next intact record, and a
  note names the file, the byte range and the steps between which values are lost;
- an incomplete last record (a run still writing, or a crash) is a note;
- a record whose length passes its checksum but exceeds the file, a record that is no
  ``Event``, and a logged scalar that is no real number (a string, complex or wrong-size
  tensor) are worded :class:`~.columns.ScanInputError` naming the file, the record and its byte offset.

>>> masked_crc32c(b"")
2726488792
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .columns import ScanInputError

_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_HEAD = 12  # the length and its checksum
_TAIL = 4  # the data's checksum


def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc_table()


def masked_crc32c(data: bytes | memoryview) -> int:
    """TFRecord's checksum: CRC-32C (Castagnoli) of ``data``, rotated and offset as TensorFlow masks it."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@dataclasses.dataclass(frozen=True)
class Damage:
    """Bytes ``start`` to ``end`` of a file skipped: ``why`` the record at ``start`` failed."""

    start: int
    end: int
    why: str


def _intact(data: bytes, offset: int) -> str | None:
    """None when a whole intact record starts at ``offset``; else what is wrong with it."""
    if len(data) - offset < _HEAD + _TAIL:
        return "incomplete"
    (length,) = _LENGTH.unpack_from(data, offset)
    if masked_crc32c(data[offset:offset + 8]) != _CRC.unpack_from(data, offset + 8)[0]:
        return "its length fails its checksum"
    if offset + _HEAD + length + _TAIL > len(data):
        return "incomplete" if length <= len(data) else f"too long: {length}"
    body = data[offset + _HEAD:offset + _HEAD + length]
    if masked_crc32c(body) != _CRC.unpack_from(data, offset + _HEAD + length)[0]:
        return "its data fails its checksum"
    return None


def _next_intact(data: bytes, start: int) -> int:
    """The offset of the next intact record at or after ``start`` (the file's length when none)."""
    for offset in range(start, len(data) - _HEAD - _TAIL + 1):
        if _intact(data, offset) is None:
            return offset
    return len(data)


def records(data: bytes, path: Any) -> Iterator[tuple[int, int, bytes] | Damage]:
    """``(index, offset, data)`` of each intact record in order, and a :class:`Damage` for each damaged stretch
    (skipped up to the next intact record, or to the end for an incomplete last record)."""
    offset = index = 0
    while offset < len(data):
        problem = _intact(data, offset)
        if problem is None:
            (length,) = _LENGTH.unpack_from(data, offset)
            yield index, offset, data[offset + _HEAD:offset + _HEAD + length]
            offset += _HEAD + length + _TAIL
        elif problem.startswith("too long"):
            raise ScanInputError(f"--metrics {path}, record {index} at byte {offset}: its length field says "
                                 f"{problem.split(': ')[1]} bytes (and passes its checksum), more than the whole file "
                                 f"({len(data)} bytes); not a TensorBoard event file, or a hostile one")
        elif problem == "incomplete":
            yield Damage(offset, len(data), "an incomplete last record (a run still writing, or a crash)")
            return
        else:
            end = _next_intact(data, offset + 1)
            yield Damage(offset, end, f"record {index} is damaged: {problem}")
            offset = end
        index += 1


def parse_event(body: bytes, path: Any, index: int, offset: int) -> Any:
    """The ``Event`` a record holds; a worded error when it holds none (or one nested past protobuf's limit)."""
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto.event_pb2 import Event

    try:
        return Event.FromString(body)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise ScanInputError(f"--metrics {path}, record {index} at byte {offset}: its checksums pass but it is no "
                             f"TensorBoard Event ({exc or type(exc).__name__}); not a TensorBoard event file, or a "
                             "hostile one") from None


def scalar(value: Any, path: Any, index: int, offset: int) -> float | None:
    """A summary value's number: ``simple_value``, or a scalar tensor of a real dtype; None for other kinds.

    A scalar tensor that is no real number (a string, a complex number, content of the wrong size) is a worded
    error naming the tag."""
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind != "tensor" or value.tensor.tensor_shape.dim:
        return None
    from tensorboard.util import tensor_util

    try:
        array = tensor_util.make_ndarray(value.tensor)
    except (ValueError, TypeError, KeyError) as exc:
        array, problem = None, f"cannot be read ({exc})"
    if array is not None:
        problem = (f"holds {array.size} values" if array.size != 1 else
                   f"is of dtype {array.dtype}" if array.dtype.kind not in "fiu" else "")
    if problem:
        raise ScanInputError(f"--metrics {path}, record {index} at byte {offset}: the scalar {value.tag!r} "
                             f"{problem}; expected one real number (a float or int tensor of shape [])")
    assert array is not None
    return float(array.item())


def lost_note(path: Path, damage: Damage, before: int | None, after: int | None) -> str:
    """What a skipped stretch cost, in steps: between the last step read before it and the first after it."""
    if before is None and after is None:
        steps = "no step of this file could be read"
    elif before is None:
        steps = f"values logged before step {after} are lost"
    elif after is None:
        steps = f"values logged after step {before} are lost"
    else:
        steps = f"values logged from step {before} to step {after} there are lost"
    return (f"{path}: {damage.why}; bytes {damage.start} to {damage.end} skipped "
            f"({damage.end - damage.start} bytes), reading went on at the next intact record: {steps}")
