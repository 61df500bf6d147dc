"""Reading a run's JSONL log line by line, each record checked against ``StepReport.to_dict()``.

A log may be hand-edited or merged from several runs; a record of the wrong shape then
gets a worded :class:`LogFormatError` naming the file, the line, what was expected and
what came, instead of a traceback deep inside the plots. A line that is not JSON at all
is a write torn by a crash (the JSONL sink leaves at most one per crash, at the end or,
after a resume, in the middle): it is skipped with a ``RuntimeWarning``, as
:func:`grpo_monitor.sinks.jsonl.read_jsonl` does.

>>> record_problem({"step": 3, "metrics": {"grpo/x": 0.5}}) is None
True
>>> record_problem({"step": 3, "metrics": [0.5]})
('"metrics"', 'an object mapping metric names to numbers', [0.5])
"""

from __future__ import annotations

import itertools
import json
import os
import reprlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from ...errors import LogFormatError as LogFormatError  # its home; this old path keeps working
from ...files.reading import limits, line_too_long, loads, open_input

#: (where in the record, what was expected, the value that came); None when the value is fine.
Problem = tuple[str, str, Any] | None

_MAX_STEP = 2**63  # steps become int64 arrays


def read_step_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The step records of a JSONL log in file order, each checked by :func:`record_problem`.

    Raises :class:`LogFormatError` (``"<file>, line <n>: ..."``) at the first JSON line that
    is not a step record; skips a line that is not JSON with a ``RuntimeWarning``.
    """
    records = []
    for number, raw, final in _lines(path):
        if not raw.strip():
            continue
        try:
            record = loads(raw, path, number)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            where = "torn final line" if final else "unreadable line"
            warnings.warn(f"{path}: skipped {where} {number} ({len(raw)} bytes, not JSON; likely a write "
                          f"interrupted by a crash): {exc}", RuntimeWarning, stacklevel=2)
            continue
        problem = record_problem(record)
        if problem is not None:
            where, expected, got = problem
            raise LogFormatError(f"{path}, line {number}: {where} should be {expected}, but got {describe(got)}; "
                                 "each line of the log is one StepReport.to_dict() record")
        records.append(record)
    return records


def _lines(path: str | os.PathLike) -> Iterator[tuple[int, bytes, bool]]:
    """(number, bytes, whether it is the file's last line) of each line of a regular file, within the line and
    file size limits (:mod:`grpo_monitor.files.reading`); a line that is not UTF-8 is handed on as it is."""
    with open_input(path) as f:
        pending: tuple[int, bytes] | None = None
        limit = limits().max_line_bytes
        for number in itertools.count(1):
            raw = f.readline(limit + 1)
            if len(raw) > limit and not raw.endswith(b"\n"):
                raise line_too_long(path, number, limit)
            if pending is not None:
                yield pending[0], pending[1], not raw
            if not raw:
                return
            pending = (number, raw.rstrip(b"\n"))


def record_problem(record: Any) -> Problem:
    """The first way ``record`` differs from a ``StepReport.to_dict()`` record, or None.

    ``step`` and ``metrics`` are required; the other fields may be absent or null; fields
    the report does not know are ignored (a newer writer may add some).
    """
    if not isinstance(record, dict):
        return "the record", "a JSON object (one step record)", record
    for field, (required, check) in _FIELDS.items():
        value = record.get(field, _MISSING)
        if (value is _MISSING or value is None) and not required:
            continue
        problem = check(value)
        if problem is not None:
            return f'"{field}"{problem[0]}', problem[1], problem[2]
    return None


#: What a check sees for an absent field.
_MISSING = object()


def describe(value: Any) -> str:
    """``value`` as it reads in the JSON, with its JSON type.

    >>> describe([1, 2]), describe("3"), describe(True), describe(None)
    ('[1, 2] (an array)', '"3" (a string)', 'true (a boolean)', 'null')
    """
    if value is _MISSING:
        return "nothing (no such field)"
    if value is None:
        return "null"
    try:
        text = json.dumps(value, allow_nan=True, default=str)
    except (RecursionError, ValueError):  # nested too deep to print: abridged
        text = reprlib.repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} ({_json_type(value)})"


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _is_number(value: Any) -> bool:
    """A JSON number that converts to a float (NaN and infinities included)."""
    if isinstance(value, float):
        return True
    return isinstance(value, int) and abs(value) <= 1e308  # bool is an int: 0 or 1


def _is_step(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _MAX_STEP


def _check_step(value: Any) -> Problem:
    return None if _is_step(value) else ("", "a non-negative integer (the training step)", value)


def _check_metrics(value: Any) -> Problem:
    if not isinstance(value, dict):
        return "", "an object mapping metric names to numbers", value
    for key, number in value.items():
        if number is not None and not _is_number(number):
            return f"[{json.dumps(key)}]", "a number, NaN or null", number
    return None


def _check_histograms(value: Any) -> Problem:
    if not isinstance(value, dict):
        return "", "an object mapping histogram names to arrays of numbers", value
    for key, values in value.items():
        if values is not None and not isinstance(values, list):
            return f"[{json.dumps(key)}]", "an array of numbers or null", values
        for i, number in enumerate(values or []):
            if number is not None and not _is_number(number):
                return f"[{json.dumps(key)}][{i}]", "a number, NaN or null", number
    return None


def _check_violations(value: Any) -> Problem:
    if not isinstance(value, list):
        return "", "an array of violation objects (Violation.to_dict())", value
    for i, violation in enumerate(value):
        problem = _check_violation(violation)
        if problem is not None:
            return f"[{i}]{problem[0]}", problem[1], problem[2]
    return None


def _check_violation(value: Any) -> Problem:
    if not isinstance(value, dict):
        return "", "an object (one Violation.to_dict())", value
    if not isinstance(value.get("invariant"), str):
        return '["invariant"]', "the invariant's name (a string)", value.get("invariant", _MISSING)
    checks = (("step", _is_step, "a non-negative integer"), ("message", _is_str, "a string"),
              ("repro_path", _is_str, "a file path (a string) or null"))
    for key, ok, expected in checks:
        if value.get(key) is not None and not ok(value[key]):
            return f'["{key}"]', expected, value[key]
    return None


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _check_type(kind: type, expected: str) -> Callable[[Any], Problem]:
    def check(value: Any) -> Problem:
        return None if isinstance(value, kind) else ("", expected, value)

    return check


#: field -> (required, check), in the order of StepReport.to_dict().
_FIELDS: dict[str, tuple[bool, Callable[[Any], Problem]]] = {
    "step": (True, _check_step),
    "metrics": (True, _check_metrics),
    "violations": (False, _check_violations),
    "estimator": (False, _check_type(str, "the estimator's name (a string) or null")),
    "convention": (False, _check_type(str, "the estimator's name (a string) or null")),  # estimator's 0.1 key
    "failed": (False, _check_type(bool, "true or false")),
    "histograms": (False, _check_histograms),
    "flagged_questions": (False, _check_type(list, "an array of question ids")),
    "run": (False, _check_type(dict, "the run record (an object: integration, settings, config)")),
    "trainer_metrics": (False, _check_type(list, "an array of trainer-metric rows (framework, key, trainer, exact)")),
}
