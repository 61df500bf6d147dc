"""Readers of JSON Lines records: verl's rollout dumps and generic JSONL, one step at a time.

Each reader has ``format``, ``source``, ``total`` and ``unit`` (for the progress bar:
bytes), ``notes`` (what a user should know about the reading), ``declared`` (settings the
run recorded: none here) and ``steps()``, which yields one :class:`~.rows.StepRows` per
step, so memory holds one step, never the run.

- **verl** (``trainer.rollout_data_dir``): one ``<step>.jsonl`` per training step written by
  ``RayPPOTrainer._dump_generations``, rows ``{"input", "output", "gts", "score", "step",
  ...reward extra fields}``. The group is ``uid`` when rows carry one (verl's v1 trainer
  writes ``{uid}_{session}_{index}``: the suffixes are dropped), else the identical ``input``.
- **jsonl**: any JSON Lines file (or a folder of them, read in name order) with a step, a
  reward and optionally a group, an advantage and a question field (names inferred, or
  given with ``--columns``); rows of a step must be contiguous.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ...files.reading import check_regular, first_line, loads
from .columns import ColumnMap, Columns, ScanInputError, first_present, float_column, missing_field, where
from .jsonlines import column, decode_lines, line_of, read_blocks
from .rows import RowBuffer, StepRows, combine_rewards, group_uids

#: Field names tried, in order, when ``--columns`` leaves one out (generic JSONL and Parquet).
STEP_NAMES = ("step", "global_step", "training_step", "train_step", "iteration", "_step")
GROUP_NAMES = ("group", "group_id", "uid", "prompt_id", "question_id", "prompt", "input", "question")
REWARD_NAMES = ("reward", "score", "rewards", "scores")
ADVANTAGE_NAMES = ("advantage", "advantages")
QUESTION_NAMES = ("prompt", "input", "question", "prompt_id", "question_id")


def natural_key(path: Path) -> tuple:
    """Sort key putting ``step2`` before ``step10``.

    >>> sorted(["b10.jsonl", "b2.jsonl"], key=lambda p: natural_key(Path(p)))
    ['b2.jsonl', 'b10.jsonl']
    """
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name))


def verl_step_files(path: Path) -> list[tuple[int, Path]]:
    """``(step, file)`` of verl's ``<step>.jsonl`` dumps in ``path`` (or ``path`` itself), by step."""
    if path.is_file():
        if not path.stem.isdigit():
            raise ScanInputError(f"{path}: a verl rollout dump is named <step>.jsonl, but got {path.name!r}")
        return [(int(path.stem), path)]
    found = sorted((int(p.stem), p) for p in path.glob("*.jsonl") if p.stem.isdigit())
    if not found:
        raise ScanInputError(f"{path}: no <step>.jsonl file (verl's trainer.rollout_data_dir holds one per step)")
    for (step, a), (again, b) in itertools.pairwise(found):
        if step == again:
            raise ScanInputError(f"{a} and {b} are both the dump of step {step}; a rollout_data_dir holds one "
                                 "<step>.jsonl per step: keep one of them (or scan each folder on its own)")
    return found


def input_folder(path: Path) -> Path | None:
    """The folder whose files a reader of ``path`` may follow symlinks within (None: ``path`` is a file)."""
    return path if path.is_dir() else None


def first_record(path: Path, folder: Path | None = None) -> tuple[int, Any]:
    """(line, record) of the first non-empty line of a JSONL file; (0, None) for an empty file.

    The file must be a regular file (inside ``folder`` when one is given) within the size limits.
    """
    n, raw = first_line(path, folder)
    if not n:
        return 0, None
    try:
        return n, loads(raw, path, n)
    except json.JSONDecodeError as exc:
        raise ScanInputError(f"{where(path, n)}: not a JSON object: {exc}") from exc


class VerlReader:
    """verl's ``rollout_data_dir``: one ``<step>.jsonl`` per step (see the module docstring)."""

    format = "verl"
    unit = "bytes"

    def __init__(self, path: str | Path, columns: ColumnMap = ColumnMap()):
        self.source = Path(path)
        self.files = verl_step_files(self.source)
        self.folder = input_folder(self.source)
        self.columns = columns
        self.total = sum(check_regular(p, self.folder) for _, p in self.files)
        self.notes: list[str] = []
        self.declared: dict[str, Any] = {}

    def steps(self) -> Iterator[StepRows]:
        for step, path in self.files:
            rows = read_verl_step(path, step, self.columns, self.notes, self.folder)
            if rows is None:
                self.notes.append(f"{path.name}: no rows, step {step} skipped")
                continue
            yield rows


def _verl_columns(record: Any, columns: ColumnMap, path: Path, line: int) -> Columns:
    if not isinstance(record, dict):
        raise missing_field(path, line, "input", record, "verl")
    defaults = ColumnMap(
        step="step", group="uid" if "uid" in record else "input", reward=("score",),
        advantage=first_present(record, ADVANTAGE_NAMES), question="input" if "input" in record else None,
    )
    return columns.over(defaults).resolved()


def read_verl_step(path: Path, step: int, columns: ColumnMap, notes: list[str],
                   folder: Path | None = None) -> StepRows | None:
    """The rows of one verl dump file, or None when it holds none."""
    records: list[Any] = []
    numbers: list[int] = []
    size = 0
    for text, first, nbytes, last in read_blocks(path, folder):
        found, lines = decode_lines(text, path, notes, first, torn_ok=last)
        records += found
        numbers += lines if lines is not None else range(first, first + len(found))
        size += nbytes
    if not records:
        return None
    lines = numbers
    cols = _verl_columns(records[0], columns, path, line_of(lines, 0))
    take = functools.partial(column, records, source=path, lines=lines, fmt="verl")
    assert cols.group is not None, "verl's defaults name the group field (uid or input)"
    groups = take(cols.group)
    questions = (groups if cols.question == cols.group else take(cols.question)) if cols.question else None
    steps = [r.get(cols.step, step) for r in records]
    if steps.count(step) != len(steps) or not all(type(s) is int for s in steps):  # True == 1: not a step
        i = next(i for i, s in enumerate(steps) if s != step or type(s) is not int)
        raise ScanInputError(f"{where(path, line_of(lines, i))}: field {cols.step!r} is {steps[i]!r} but the file is "
                             f"the dump of step {step} ({path.name}); one <step>.jsonl per step is expected")
    rewards = combine_rewards([float_column(take(k), k, path, lines) for k in cols.reward])
    adv = float_column(take(cols.advantage), cols.advantage, path, lines) if cols.advantage else None
    if cols.group == "uid":
        groups = group_uids(groups)
    return StepRows(step, str(path), line_of(lines, 0), rewards, groups, questions, adv, size)


def jsonl_files(path: Path) -> list[Path]:
    """``path`` itself, or the ``*.jsonl`` files of a folder in natural name order."""
    if path.is_file():
        return [path]
    files = sorted(path.glob("*.jsonl"), key=natural_key)
    if not files:
        raise ScanInputError(f"{path}: no *.jsonl file in this folder")
    return files


def generic_columns(keys: Sequence[str], columns: ColumnMap, source: Any, line: int, fmt: str,
                    group_size: int | None) -> Columns:
    """Resolve the field names from the first record's keys (``--columns`` wins); worded when one is missing."""
    group = columns.group or first_present(keys, GROUP_NAMES)
    question = columns.question or first_present(keys, QUESTION_NAMES)
    reward = first_present(keys, REWARD_NAMES)
    cols = columns.over(ColumnMap(
        step=first_present(keys, STEP_NAMES), group=group,
        reward=(reward,) if reward else None,
        advantage=first_present(keys, ADVANTAGE_NAMES), question=question,
    ))
    have = ", ".join(sorted(map(str, keys))[:15])
    if cols.step is None or cols.reward is None:
        what, tried = ("step", STEP_NAMES) if cols.step is None else ("reward", REWARD_NAMES)
        raise ScanInputError(f"{where(source, line)}: no {what} field ({fmt} format; looked for "
                             f"{', '.join(tried)}); the row has: {have}. Name it with --columns {what}=FIELD")
    if cols.group is None and group_size is None:
        raise ScanInputError(f"{where(source, line)}: no group field (looked for {', '.join(GROUP_NAMES)}); the row "
                             f"has: {have}. Name it with --columns group=FIELD, or pass --group-size G when each "
                             "group is G consecutive rows")
    return cols.resolved()


class JsonlReader:
    """Generic JSON Lines: one row per response, steps one after another (see the module docstring)."""

    format = "jsonl"
    unit = "bytes"

    def __init__(self, path: str | Path, columns: ColumnMap = ColumnMap(), group_size: int | None = None):
        self.source = Path(path)
        self.files = jsonl_files(self.source)
        self.folder = input_folder(self.source)
        self.total = sum(check_regular(p, self.folder) for p in self.files)
        self.notes: list[str] = []
        self.declared: dict[str, Any] = {}
        line, record = next(((ln, r) for ln, r in (first_record(p, self.folder) for p in self.files)
                             if r is not None), (0, None))
        if not isinstance(record, dict):
            raise missing_field(self.files[0], max(line, 1), "step", record, "jsonl")
        self.columns = generic_columns(list(record), columns, self.files[0], line, "jsonl", group_size)

    def steps(self) -> Iterator[StepRows]:
        c = self.columns
        buf = RowBuffer(c.reward, c.group is not None, c.question is not None, c.advantage is not None)
        for path in self.files:
            for text, first, size, last in read_blocks(path, self.folder):
                records, lines = decode_lines(text, path, self.notes, first, torn_ok=last)
                if lines is None:
                    lines = list(range(first, first + len(records)))
                take = functools.partial(column, records, source=path, lines=lines, fmt="jsonl")
                batch = {key: take(key) for key in self.fields()}
                yield from buf.feed(batch, c, str(path), lines, size)
        done = buf.finish()
        if done is not None:
            yield done
        note = buf.skipped_note(c.step)
        if note:
            self.notes.append(note)

    def fields(self) -> list[str]:
        """The fields read from each record."""
        c = self.columns
        return list(dict.fromkeys(n for n in (c.step, *c.reward, c.group, c.question, c.advantage) if n is not None))
