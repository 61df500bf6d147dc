"""Which field of a recorded row holds what, and the worded error for a row that does not fit.

A scan needs, per row: the training ``step``, the ``group`` the row belongs to, its
``reward`` (one field, or several summed, as TRL sums its reward functions) and, when
recorded, its ``advantage``; the ``question`` (the prompt) names the row's question
across steps, for the iid prediction and the stuck/saturated questions.

>>> parse_columns("step=global_step,reward=acc+format")
ColumnMap(step='global_step', group=None, reward=('acc', 'format'), advantage=None, question=None)
"""

from __future__ import annotations

import dataclasses
import math
import reprlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...files.reading import InputFileError

#: Steps are int64 (TensorBoard, numpy arrays of steps): 0 <= step < 2**63.
MAX_STEP = 2**63
#: The keys of ``--columns``.
FIELDS = ("step", "group", "reward", "advantage", "question")


class ScanInputError(InputFileError):
    """A recorded file or row that does not fit the format: names the file, the line (or row) and the field.

    A ``ValueError``; its base :class:`~grpo_monitor.files.InputFileError` is what the file
    readers raise (not a regular file, over a size limit, JSON too deep or out of range):
    :func:`~grpo_monitor.tools.scan.scan_rollouts` raises both as a ``ScanInputError``.
    """


@dataclasses.dataclass(frozen=True)
class ColumnMap:
    """Field names of the rows; None: the reader's default (or absent, for ``advantage`` and ``question``)."""

    step: str | None = None
    group: str | None = None
    reward: tuple[str, ...] | None = None
    advantage: str | None = None
    question: str | None = None

    def over(self, defaults: ColumnMap) -> ColumnMap:
        """These names where set, ``defaults`` elsewhere."""
        return ColumnMap(**{f: getattr(self, f) if getattr(self, f) is not None else getattr(defaults, f)
                            for f in FIELDS})

    def resolved(self) -> Columns:
        """These names as :class:`Columns`; ``step`` and ``reward`` must be known by now."""
        if self.step is None or self.reward is None:
            raise ValueError(f"expected the step and reward fields to be resolved, but got {self}")
        return Columns(self.step, self.reward, self.group, self.advantage, self.question)


@dataclasses.dataclass(frozen=True)
class Columns:
    """The fields a reader reads, resolved: ``step`` and ``reward`` always; ``group`` None when each group is
    ``group_size`` consecutive rows; ``advantage`` and ``question`` None when the rows have none."""

    step: str
    reward: tuple[str, ...]
    group: str | None = None
    advantage: str | None = None
    question: str | None = None


def parse_columns(text: str | None) -> ColumnMap:
    """``--columns step=S,group=G,reward=R[+R2...],advantage=A,question=Q`` (any subset) as a :class:`ColumnMap`."""
    if not text:
        return ColumnMap()
    found: dict[str, Any] = {}
    for pair in text.split(","):
        key, sep, value = (part.strip() for part in pair.partition("="))
        if not sep or key not in FIELDS or not value:
            raise ScanInputError(
                f"--columns: expected KEY=COLUMN pairs separated by commas, KEY one of {', '.join(FIELDS)} "
                f"(reward may sum columns: reward=a+b), but got {pair.strip()!r} in {text!r}"
            )
        if key in found:
            raise ScanInputError(f"--columns: {key} is given twice in {text!r}")
        found[key] = tuple(v.strip() for v in value.split("+")) if key == "reward" else value
    return ColumnMap(**found)


def first_present(keys: Iterable[str], candidates: Sequence[str]) -> str | None:
    """The first of ``candidates`` among ``keys``, or None."""
    have = set(keys)
    return next((c for c in candidates if c in have), None)


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 3, 60, 60, 40


def describe(value: Any) -> str:
    """A short rendering of a value for an error message: its repr (cut at 60 characters; nesting, long
    numbers and long texts abridged, never recursing deep) and type.

    >>> describe([[[[[1]]]]])
    '[[[[...]]]] (list)'
    """
    text = _SHORT.repr(value)
    return f"{text[:60]}{'...' if len(text) > 60 else ''} ({type(value).__name__})"


def where(source: Any, line: int, unit: str = "line") -> str:
    """``"<file>, line <n>"`` (or ``row <n>``) for messages."""
    return f"{source}, {unit} {line}"


def float_column(values: list[Any], field: str, source: Any, lines: Sequence[int] | None,
                 unit: str = "line") -> np.ndarray:
    """``values`` as float64; ``None`` (and JSON ``NaN``) become NaN: an unscorable row.

    Numbers, booleans and numeric strings (``"0.5"``, written by ``json.dumps(default=str)``)
    are accepted; anything else raises :class:`ScanInputError` naming the file, the line and
    the field. ``lines[i]`` is the line (or row) number of ``values[i]``.

    >>> float_column([1, None, "0.5", True], "score", "0.jsonl", None).tolist()
    [1.0, nan, 0.5, 1.0]
    """
    try:
        array = np.asarray(values, dtype=np.float64)
        if array.ndim == 1:
            return array
    except (TypeError, ValueError, OverflowError, RecursionError):
        pass
    for i, value in enumerate(values):
        if not _is_number(value):
            line = lines[i] if lines is not None else i + 1
            if isinstance(value, int):
                digits = int(value.bit_length() * 0.30103) + 1
                raise ScanInputError(f"{where(source, line, unit)}: field {field!r} holds a number out of range "
                                     f"(an integer of about {digits} digits; a float holds up to about 1e308)")
            raise ScanInputError(
                f"{where(source, line, unit)}: field {field!r} should be a number or null (unscorable), "
                f"but got {describe(value)}"
            )
    raise ScanInputError(f"{source}: field {field!r} could not be read as numbers")  # pragma: no cover


def _is_number(value: Any) -> bool:
    if isinstance(value, int):
        return abs(value) <= 1e308  # a larger int is no float (OverflowError)
    if value is None or isinstance(value, (float, np.number)):
        return True
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return False
        return True
    return False


def step_number(value: Any, field: str, source: Any, line: int, unit: str = "line") -> int:
    """A recorded step as an int (an integral float or a numeric string is accepted), else a worded error.

    >>> step_number(3.0, "step", "run.jsonl", 1)
    3
    """
    if isinstance(value, int) and not isinstance(value, bool):
        step = value
    else:
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            number = math.nan
        if isinstance(value, bool) or not math.isfinite(number) or number != int(number):
            raise ScanInputError(f"{where(source, line, unit)}: field {field!r} should be an integer step, "
                                 f"but got {describe(value)}")
        step = int(number)
    if not 0 <= step < MAX_STEP:
        got = str(step) if abs(step) < 10**30 else f"an integer of about {int(step.bit_length() * 0.30103) + 1} digits"
        raise ScanInputError(f"{where(source, line, unit)}: field {field!r} should be a step from 0 to 2**63 - 1, "
                             f"but got {got} (out of range)")
    return step


def missing_field(source: Any, line: int, field: str, record: Any, fmt: str, unit: str = "line") -> ScanInputError:
    """The error for a row without ``field`` (or not an object at all)."""
    if not isinstance(record, dict):
        return ScanInputError(f"{where(source, line, unit)}: expected one JSON object per row ({fmt} format), "
                              f"but got {describe(record)}")
    have = ", ".join(sorted(map(str, record))[:12])
    return ScanInputError(
        f"{where(source, line, unit)}: the row has no field {field!r} ({fmt} format); it has: {have}. "
        "Name the field with --columns (e.g. --columns reward=acc,group=uid) or pick another --format"
    )
