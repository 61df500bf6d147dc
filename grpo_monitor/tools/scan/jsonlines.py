"""JSON Lines at the speed of the stdlib parser itself, with worded errors when a line does not fit.

The fast path decodes the text once and runs the C scanner of :mod:`json` on each line
(``JSONDecoder().scan_once``: what ``json.loads`` runs, without its per-call wrappers),
then takes columns with list comprehensions. Anything unusual (a blank line inside, a
line that is not one JSON value, a missing field, a record that is not an object) falls
back to a slow pass that names the file and the line.

>>> records, lines = decode_lines('{"a": 1}\\n{"a": 2}\\n', "x.jsonl", [])
>>> column(records, "a", "x.jsonl", lines, "jsonl")
[1, 2]
"""

from __future__ import annotations

import json
import operator
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from ...files.reading import loads, open_input, read_text_blocks
from .columns import ScanInputError, missing_field, where

# the decoder's scanner (set in JSONDecoder.__init__; typeshed does not declare it)
_SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_OBJ, _END = operator.itemgetter(0), operator.itemgetter(1)


def split_lines(text: str) -> list[str]:
    """Lines of a JSONL text (``\\n``-separated: U+2028 inside a string is not a line break), the final empty
    one dropped."""
    lines = text.split("\n")
    if lines and not lines[-1]:
        lines.pop()
    return lines


def decode_lines(text: str, source: Any, notes: list[str], first: int = 1,
                 torn_ok: bool = True) -> tuple[list[Any], list[int] | None]:
    """The records of ``text`` and their line numbers (None: line ``1 + i`` for record i).

    With ``torn_ok``, a final line that is not JSON (a write cut short) is skipped with a
    warning and a note; any other line that is not one JSON value raises
    :class:`ScanInputError` with its number (``first`` is the number of the text's first line).
    """
    lines = split_lines(text)
    try:
        pairs = [_SCAN(line, 0) for line in lines]
        if list(map(_END, pairs)) == list(map(len, lines)):  # each line is exactly one JSON value
            return list(map(_OBJ, pairs)), None if first == 1 else list(range(first, first + len(lines)))
    except (StopIteration, ValueError, RecursionError):
        pass
    return _slow_lines(lines, source, notes, first, torn_ok)


def _slow_lines(lines: Sequence[str], source: Any, notes: list[str], first: int,
                torn_ok: bool) -> tuple[list[Any], list[int]]:
    records, numbers = [], []
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(loads(line, source, first + i))
        except json.JSONDecodeError as exc:
            if i != last or not torn_ok:
                raise ScanInputError(f"{where(source, first + i)}: not a JSON value: {exc}") from exc
            torn_tail(source, first + i, exc, notes)
            continue
        numbers.append(first + i)
    return records, numbers


def torn_tail(source: Any, line: int, exc: Exception, notes: list[str]) -> None:
    """A final line that is not JSON (a write cut short by a crash): warn and note it; the scan goes on."""
    text = f"{where(source, line)}: skipped a torn final line (not JSON; a write cut short): {exc}"
    warnings.warn(text, RuntimeWarning, stacklevel=3)
    notes.append(text)


def line_of(lines: list[int] | None, index: int) -> int:
    """The line number of record ``index``."""
    return lines[index] if lines is not None else index + 1


def column(records: list[Any], key: str, source: Any, lines: list[int] | None, fmt: str) -> list[Any]:
    """``record[key]`` of every record, or a worded error naming the first record without it."""
    try:
        return [r[key] for r in records]
    except (KeyError, TypeError, IndexError):
        pass
    for i, r in enumerate(records):
        if not isinstance(r, dict) or key not in r:
            raise missing_field(source, line_of(lines, i), key, r, fmt)
    raise AssertionError("unreachable")  # pragma: no cover


def read_blocks(path: Any, folder: Any = None) -> Iterator[tuple[str, int, int, bool]]:
    """``(text, first line number, bytes, last)`` of successive blocks of whole lines of a regular file.

    Memory holds one block; the file must be a regular file within the size limits and a
    byte sequence that is not UTF-8 is a worded error with its line
    (:mod:`grpo_monitor.files.reading`).
    """
    with open_input(path, folder) as f:
        yield from read_text_blocks(f, path)
