"""TRL's completions tables (``log_completions=True``), one table per logging step.

TRL 1.16's ``GRPOTrainer.log`` builds a table of the latest generation batch: ``step``
(the global step), ``prompt``, ``completion``, one column per reward function (``None``
where the function did not score the row), the ``log_extra`` columns and ``advantage``.
It logs it to W&B as ``completions`` (an offline run keeps it as
``files/media/table/completions_<wandb step>_<hash>.table.json``: **trl-wandb**) and
writes ``<output_dir>/completions/completions_<step>.parquet`` (**trl-parquet**).

The reward of a row is TRL's: the reward columns summed with ``reward_weights`` in
float32, skipping ``None``; a row no function scored is NaN (unscorable). The reward
columns are the functions TRL logged ``train/rewards/<name>/mean`` for, and
``reward_weights``, ``num_generations`` and ``scale_rewards`` come from the run's config,
when the W&B run is there to tell; otherwise every numeric column but ``step`` and
``advantage`` is a reward with weight 1 (say which with ``--columns reward=a+b``).
Groups are rows of the identical prompt within a step. A table equal to the previous
one (TRL logs the latest generation batch at every logging step, so one generation used
for several steps is logged several times) is skipped.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Hashable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...files.reading import check_regular, loads, read_input
from .columns import ColumnMap, ScanInputError, describe, float_column, step_number
from .rows import StepRows, combine_rewards, runs_of

#: TRL's ``scale_rewards`` -> the registry estimator, as ``grpo_monitor.integrations.trl`` declares it.
TRL_CONVENTIONS = {"group": "trl.group", "batch": "trl.batch", "none": "trl.none"}
_NOT_REWARDS = {"step", "prompt", "completion", "advantage", "image", "images"}
_TABLE = re.compile(r"^(?P<key>.+)_(?P<wstep>\d+)_[0-9a-f]+\.table\.json$")
_PARQUET = re.compile(r"^completions_(?P<step>\d+)\.parquet$")


def wandb_table_files(run: Path, key: str = "completions") -> list[Path]:
    """The ``<key>`` table files of an offline W&B run folder, in logging order."""
    folder = run / "files" / "media" / "table"
    found = []
    for path in folder.glob(f"{key}_*.table.json") if folder.is_dir() else ():
        m = _TABLE.match(path.name)
        if m and m["key"] == key:
            found.append((int(m["wstep"]), path))
    if not found:
        raise ScanInputError(f"{run}: no W&B table {key!r} under files/media/table/; was the TRL run started with "
                             "log_completions=True and report_to=['wandb']?")
    return [p for _, p in sorted(found)]


def trl_parquet_files(path: Path) -> list[Path]:
    """``completions_<step>.parquet`` files of a TRL output folder (or its ``completions/`` folder), by step."""
    folder = path / "completions" if (path / "completions").is_dir() else path
    found = sorted((int(m["step"]), p) for p in folder.glob("completions_*.parquet")
                   if (m := _PARQUET.match(p.name)))
    if not found:
        raise ScanInputError(f"{path}: no completions_<step>.parquet (TRL writes them to <output_dir>/completions/ "
                             "with log_completions=True)")
    return [p for _, p in found]


def wandb_run_meta(run: Path) -> dict[str, Any]:
    """``config`` and the ``reward_names`` TRL logged means for, read from the run's ``.wandb`` file
    ({} when unreadable)."""
    files = sorted(run.glob("run-*.wandb"))
    if not files:
        return {}
    try:
        from ...sinks.wandb_reader import history_rows, read_wandb_records, value_of

        check_regular(files[-1], run)  # a FIFO or a device there would hang or never end
        records = read_wandb_records(files[-1])
    except (ImportError, ValueError, OSError):
        return {}
    config: dict[str, Any] = {}
    try:  # a value too deep, out of range or not JSON: worded, naming the file (the run's config decides G)
        for r in records:
            if r.WhichOneof("record_type") == "config":
                for item in r.config.update:
                    value = value_of(item)
                    config[item.key] = value.get("value", value) if isinstance(value, dict) and "value" in value \
                        else value
        rows = history_rows(records)
    except ValueError as exc:
        raise ScanInputError(f"{files[-1]}: {exc}") from None
    names = {k.split("/")[2] for row in rows for k in _flat_keys(row)
             if k.startswith("train/rewards/") and k.endswith("/mean") and k.count("/") == 3}
    return {"config": config, "reward_names": names}


def _flat_keys(row: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in row.items():
        if isinstance(value, dict) and not value.get("_type"):
            yield from _flat_keys(value, f"{prefix}{key}/")
        else:
            yield f"{prefix}{key}"


def declared_settings(config: dict[str, Any]) -> dict[str, Any]:
    """``group_size``, ``estimator`` and ``stabilizer`` a TRL run's config declares (those it holds)."""
    out: dict[str, Any] = {}
    if isinstance(config.get("num_generations"), int):
        out["group_size"] = config["num_generations"]
    scale = config.get("scale_rewards")
    flags: dict[Any, str] = {True: "group", False: "none"}  # older TRL: a bool
    scale = flags.get(scale, scale)
    if config.get("multi_objective_aggregation") == "normalize_then_sum":
        out["estimator"], out["stabilizer"] = "trl.normalize_then_sum", None
    elif scale in TRL_CONVENTIONS:
        out["estimator"], out["stabilizer"] = TRL_CONVENTIONS[scale], None
    return out


def wandb_table(table: Any, path: Path) -> tuple[list[str], list[list[Any]]]:
    """(column names, rows) of a decoded W&B table file, each row as long as the column list; else worded."""
    expected = 'expected {"columns": [names], "data": [[cells], ...]}'
    if not isinstance(table, dict):
        raise ScanInputError(f"{path}: not a W&B table file ({expected}), but got {describe(table)}")
    names, data = table.get("columns"), table.get("data")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ScanInputError(f"{path}: the table's \"columns\" should be a list of names ({expected}), but got "
                             f"{describe(names)}")
    if not isinstance(data, list):
        raise ScanInputError(f"{path}: the table's \"data\" should be a list of rows ({expected}), but got "
                             f"{describe(data)}")
    for i, row in enumerate(data):
        if not isinstance(row, list) or len(row) != len(names):
            cells = f"{len(row)} cells" if isinstance(row, list) else describe(row)
            raise ScanInputError(f"{path}, row {i + 1}: {cells} but the table has {len(names)} columns "
                                 f"({', '.join(names)}); a W&B table row holds one cell per column")
    return names, data


class TrlTableReader:
    """TRL's completions tables from an offline W&B run (``trl-wandb``) or TRL's Parquet files (``trl-parquet``)."""

    unit = "bytes"

    def __init__(self, path: str | Path, fmt: str, columns: ColumnMap = ColumnMap()):
        self.format = fmt
        self.source = Path(path)
        self.folder = self.source if self.source.is_dir() else None
        meta: dict[str, Any] = {}
        if fmt == "trl-wandb":
            self.files = wandb_table_files(self.source)
            meta = wandb_run_meta(self.source)
        else:
            self.files = trl_parquet_files(self.source)
        self.config = meta.get("config", {})
        self.reward_names = meta.get("reward_names", set())
        self.declared = declared_settings(self.config)
        self.columns = columns.over(ColumnMap(step="step", group="prompt", advantage="advantage", question="prompt"))
        self.total = sum(check_regular(p, self.folder) for p in self.files)
        self.notes: list[str] = []
        self._previous: tuple[tuple[Any, ...], ...] | None = None
        self._last_step: int | None = None
        self._rewards_noted = False
        if "group_size" not in self.declared and columns.group is None:
            self._infer_group_size()

    def _infer_group_size(self) -> None:
        """Without the run's config: G = the gcd of the runs of one prompt in the first table (TRL writes
        a group's rows together), so a prompt drawn twice in a step is still two groups."""
        names, rows = self._load(self.files[0])
        if self.columns.group not in names or not rows:
            return
        column = names.index(self.columns.group)
        prompts = [json.dumps(r[column], sort_keys=True, default=str) for r in rows]
        size = math.gcd(*(end - start for start, end in runs_of(prompts)))
        if size >= 2:
            self.declared["group_size"] = size
            self.notes.append(f"group size {size} inferred from the rows of each prompt in {self.files[0].name} "
                              "(pass --group-size to set it)")

    def steps(self) -> Iterator[StepRows]:
        for path in self.files:
            names, rows = self._load(path)
            if not rows:
                self.notes.append(f"{path.name}: an empty table, skipped")
                continue
            step_rows = self._step_rows(path, names, rows)
            if step_rows is not None:
                step_rows.units = check_regular(path, self.folder)
                yield step_rows

    def _load(self, path: Path) -> tuple[list[str], list[list[Any]]]:
        """(column names, rows) of one table file."""
        if self.format == "trl-parquet":
            from .parquet import arrow_errors, open_parquet

            with arrow_errors(path):
                table = open_parquet(path, self.folder).read()
                names = table.column_names
                columns = [table.column(n).to_pylist() for n in names]
            return names, [list(r) for r in zip(*columns, strict=True)]
        try:
            table = loads(read_input(path, self.folder), path)
        except json.JSONDecodeError as exc:
            raise ScanInputError(f"{path}: not a W&B table file (not JSON: {exc})") from exc
        return wandb_table(table, path)

    def _step_rows(self, path: Path, names: list[str], rows: list[list[Any]]) -> StepRows | None:
        index = {n: i for i, n in enumerate(names)}
        c = self.columns
        assert c.step is not None and c.group is not None, "TRL's defaults name the step and group columns"
        for field in (c.step, c.group):
            if field not in index:
                raise ScanInputError(f"{path}, row 1: the table has no column {field!r} (trl format); it has "
                                     f"{', '.join(names)}. Name it with --columns")
        reward_cols = self._reward_columns(path, names, rows[0])
        cols = list(zip(*rows, strict=False))
        lines = range(1, len(rows) + 1)
        step = self._single_step(path, cols[index[c.step]], c.step)
        if self._repeats(path, step, cols, index):
            return None
        rewards = combine_rewards([float_column(list(cols[index[n]]), n, path, lines, "row") for n in reward_cols],
                                  self._weights(reward_cols), dtype=np.float32)
        adv = None
        if c.advantage in index:
            adv = float_column(list(cols[index[c.advantage]]), c.advantage, path, lines, "row")
        prompts: list[Hashable] = [p if isinstance(p, str) else json.dumps(p, sort_keys=True, default=str)
                                   for p in cols[index[c.group]]]
        questions = prompts
        if c.question in index and c.question != c.group:
            questions = list(cols[index[c.question]])
        return StepRows(step, str(path), 1, rewards, prompts, questions, adv, unit="row")

    def _single_step(self, path: Path, values: Sequence[Any], field: str) -> int:
        step = step_number(values[0], field, path, 1, "row")
        for i, v in enumerate(values):
            if v != values[0]:
                raise ScanInputError(f"{path}, row {i + 1}: column {field!r} is {describe(v)} but row 1 "
                                     f"holds {values[0]!r}; a completions table holds one logging step")
        return step

    def _repeats(self, path: Path, step: int, cols: list[tuple], index: dict[str, int]) -> bool:
        """True (and noted) for a table equal to the previous one, or for a step that does not increase."""
        key = tuple(cols[index[n]] for n in ("completion", self.columns.advantage) if n in index)
        if key and key == self._previous:
            self.notes.append(f"{path.name}: step {step} logged the same generation batch as the previous table; "
                              "skipped (TRL logs the latest generation at every logging step)")
            return True
        if self._last_step is not None and step <= self._last_step:
            self.notes.append(f"{path.name}: step {step} comes after step {self._last_step} (a resumed run?); skipped")
            return True
        self._previous, self._last_step = key, step
        return False

    def _reward_columns(self, path: Path, names: list[str], first: list[Any]) -> tuple[str, ...]:
        if self.columns.reward is not None:
            missing = [n for n in self.columns.reward if n not in names]
            if missing:
                raise ScanInputError(f"{path}, row 1: no column {missing[0]!r} for --columns reward; the table has "
                                     f"{', '.join(names)}")
            return self.columns.reward
        known = tuple(n for n in names if n in self.reward_names)
        if known:
            return known
        found = tuple(n for n, v in zip(names, first, strict=False) if n not in _NOT_REWARDS
                      and (v is None or isinstance(v, (int, float))) and not isinstance(v, bool))
        if not found:
            raise ScanInputError(f"{path}, row 1: no reward column (numbers, one per reward function) among "
                                 f"{', '.join(names)}; name them with --columns reward=a+b")
        if not self._rewards_noted:
            self._rewards_noted = True
            where = "could not be read from its W&B history" if self.format == "trl-wandb" else \
                "are not recorded with TRL's Parquet files"
            self.notes.append(f"reward = sum of the columns {', '.join(found)} (the run's reward functions {where}; "
                              "choose with --columns reward=a+b)")
        return found

    def _weights(self, reward_cols: Sequence[str]) -> list[float] | None:
        weights = self.config.get("reward_weights")
        if self.columns.reward is None and isinstance(weights, list) and len(weights) == len(reward_cols):
            return [float(w) for w in weights]
        return None
