"""Scan a finished run: read its recorded rollouts step by step and feed the monitor a live run uses.

Each step is read, grouped (:mod:`.groups`) and handed to one :class:`GRPOMonitor`
(``observe_rollout`` then ``end_step(step=<the recorded step>)``), so the outputs are the
live ones: ``monitor.jsonl``, TensorBoard events and ``report.html``. Violations are
recorded, never raised (``on_violation="warn"``): a scan audits the whole run. Memory
holds one step: nothing of an earlier step is kept but the monitor's own bounded state
and the bounded question tally.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...files.reading import InputFileError
from ...files.writing import OutputDir
from ..reporting.facts import plural
from .columns import ColumnMap, ScanInputError
from .detect import open_reader
from .groups import build_groups
from .logged import LoggedMetrics, logged_notes, recorded_metrics
from .prefetch import StepInfo, prefetched_steps
from .progress import DelayedProgress
from .summary import ViolationLog
from .tally import QuestionTally

LOG_NAME = "monitor.jsonl"
TB_NAME = "tensorboard"
#: What a scan writes into its output folder (``--overwrite`` removes these, nothing else).
OUTPUTS = (LOG_NAME, TB_NAME, "report.html", "plots", "run.json")


@dataclasses.dataclass
class ScanResult:
    """What a scan read and wrote; :func:`.summary.format_summary` prints it."""

    source: Path
    format: str
    out: Path
    config: dict[str, Any]
    steps: int = 0
    rows: int = 0
    groups: int = 0
    first_step: int | None = None
    last_step: int | None = None
    advantages: bool = False
    split_groups: int = 0
    #: steps whose group values were of several types (kept apart), the first of them, and the types seen
    mixed_type_steps: int = 0
    mixed_first_step: int | None = None
    mixed_types: set[str] = dataclasses.field(default_factory=set)
    #: parts an internal fault switched off (each is retried on the next step): (first step, last step, steps) off
    disabled: dict[str, tuple[int, int, int]] = dataclasses.field(default_factory=dict)
    #: steps that got the trainer's own logged sampler-side metrics (``.logged``), and their source keys
    logged_steps: int = 0
    logged_keys: dict[str, str] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    report: Path | None = None
    tensorboard: Path | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    violations: ViolationLog = dataclasses.field(default_factory=ViolationLog)
    questions: QuestionTally = dataclasses.field(default_factory=QuestionTally)

    @property
    def log(self) -> Path:
        """The ``monitor.jsonl`` written."""
        return self.out / LOG_NAME

    @property
    def errors(self) -> int:
        """Invariants broken with error severity, plus one when the monitor switched a part off
        (its checks did not run on every step); ``--fail-on-error`` exits 1 when this is not 0."""
        return self.violations.errors + bool(self.disabled)

    def outputs(self) -> list[Path]:
        return [p for p in (self.log, self.tensorboard, self.report) if p is not None]


def monitor_config(declared: dict[str, Any], group_size: int | None, estimator: str | None) -> Any:
    """The ``MonitorConfig`` of a scan: the options given, else what the run declared, policy ``warn``.

    ``estimator`` is ``MonitorConfig.estimator`` (its validation words a bad name): a registry name,
    or ``MODULE:FUNCTION``, your own estimator (``rewards (B, G) -> advantages (B, G)``) declared under
    that name.
    """
    from ...config import MonitorConfig

    settings: dict[str, Any] = {"on_violation": "warn", "sink_when_full": "block"}  # nothing waits: no drops
    size = group_size if group_size is not None else declared.get("group_size")
    if size is not None:
        settings["group_size"] = size
    if estimator is not None:
        settings["estimator"] = _estimator(estimator)
    elif "estimator" in declared:
        settings["estimator"] = declared["estimator"]
        settings["stabilizer"] = declared.get("stabilizer")
    try:
        return MonitorConfig(**settings)
    except ValueError as exc:  # pydantic's ValidationError
        errors: list[dict[str, Any]] = getattr(exc, "errors", lambda: [])()
        what = "; ".join(f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg')}" for e in errors) or str(exc)
        option = "--estimator" if estimator is not None and "estimator" in what else "--group-size"
        raise ScanInputError(f"{option}: {what} (got group_size={size!r}, estimator={estimator!r})") from exc


def _estimator(spec: str) -> str:
    """A registry name as is; ``MODULE:FUNCTION`` loaded and declared (``estimators.custom``) under ``spec``."""
    if ":" not in spec:
        return spec
    from ...estimators.custom import custom
    from ..audit.loading import load_function

    try:
        return custom(load_function(spec), name=spec).name
    except (ValueError, TypeError, ImportError, SyntaxError) as exc:
        raise ScanInputError(f"--estimator: {spec!r} could not be declared: {exc}") from exc


def _check_estimator(estimator: str | None) -> None:
    """An unknown ``--estimator`` is one line naming the closest registry names."""
    from ...estimators.registry import ESTIMATORS, unknown_estimator

    if estimator is not None and estimator != "auto" and ":" not in estimator and estimator not in ESTIMATORS:
        raise ScanInputError(str(unknown_estimator(estimator, "--estimator")))


def prepare_out(out: Path, overwrite: bool) -> None:
    """Create ``out``; refuse the outputs of an earlier scan there unless ``overwrite`` (they are replaced only
    once the new scan has read its whole input)."""
    out.mkdir(parents=True, exist_ok=True)
    present = [name for name in OUTPUTS if (out / name).exists() or (out / name).is_symlink()]
    if present and not overwrite:
        raise ScanInputError(f"{out} already holds {', '.join(present)} (an earlier scan?); pass --overwrite to "
                             "replace them, or another --out")


def remove_outputs(out: Path) -> None:
    """Remove what a scan writes into ``out`` (:data:`OUTPUTS`), nothing else."""
    for name in OUTPUTS:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def _no_flush() -> None:
    """Stands in for ``SummaryWriter.flush`` during a scanned step."""


def _sinks(out: Path, tensorboard: bool) -> list[Any]:
    from ...sinks import JSONLSink, TensorBoardSink

    class ScanTensorBoard(TensorBoardSink):
        """TensorBoard written inline (a scan outpaces a background queue, and must not drop a step),
        flushed when the scan ends rather than after every step (nobody tails a scan's events)."""

        synchronous = True

        def log_report(self, report: Any) -> None:
            writer = self.writer
            writer.flush = _no_flush  # an instance attribute shadows SummaryWriter.flush for this call only
            try:
                super().log_report(report)
            finally:
                del writer.flush

    sinks: list[Any] = [JSONLSink(out / LOG_NAME, fsync=False)]  # a scan can be rerun: no fsync per step
    if tensorboard and importlib.util.find_spec("tensorboard") is not None:
        sinks.append(ScanTensorBoard(out / TB_NAME))
    return sinks


def scan_rollouts(path: str | Path, out: str | Path, *, fmt: str = "auto", group_size: int | None = None,
                  estimator: str | None = None, columns: ColumnMap = ColumnMap(), overwrite: bool = False,
                  quiet: bool = False, console: Any = None, report: bool = True, tensorboard: bool = True,
                  prefetch: bool | None = None, metrics: str | Path | None = None) -> ScanResult:
    """Scan the rollouts recorded at ``path`` into ``out`` (see the module docstring); the :class:`ScanResult`.

    ``metrics`` is the run's recording of its logged scalars (an offline W&B run, TensorBoard event files,
    verl's ``file`` logger JSONL): the sampler-side keys it holds are reported under the monitor's keys
    (:mod:`.logged`). A TRL W&B run scanned for its tables is read for them by itself.

    ``prefetch`` reads and groups in a child process, beside the monitor (None: when the
    input is large and there is more than one CPU). Raises :class:`ScanInputError` (a
    ValueError) naming the file, the line and the field when a record does not fit, and
    for bad options.
    """
    try:
        return _scan(path, Path(out), fmt, group_size, estimator, columns, overwrite, quiet, console, report,
                     tensorboard, prefetch, metrics)
    except InputFileError as exc:
        if isinstance(exc, ScanInputError):
            raise
        raise ScanInputError(str(exc)) from exc


def _scan(path: str | Path, out: Path, fmt: str, group_size: int | None, estimator: str | None, columns: ColumnMap,
          overwrite: bool, quiet: bool, console: Any, report: bool, tensorboard: bool,
          prefetch: bool | None, metrics: str | Path | None) -> ScanResult:
    if group_size is not None and (not isinstance(group_size, int) or group_size < 2):
        raise ScanInputError(f"--group-size must be an integer >= 2, but got {group_size!r}")
    _check_estimator(estimator)
    reader = open_reader(path, fmt, columns, group_size)
    logged = recorded_metrics(metrics, reader)
    config = monitor_config(reader.declared, group_size, estimator)
    read = [reader.source, *(f[1] if isinstance(f, tuple) else f for f in reader.files)]
    check_out(out, read if metrics is None else [*read, Path(metrics)])  # --metrics is an input too
    created = not out.exists()
    prepare_out(out, overwrite)
    staging = Path(tempfile.mkdtemp(prefix=".grpo-monitor-scan-", dir=out))
    try:
        result = _scan_into(staging, path, reader, config, columns, estimator, quiet, console, tensorboard, prefetch,
                            logged)
    except Exception:  # a record that does not fit (or a fault): --out stays as it was, earlier outputs included
        shutil.rmtree(staging, ignore_errors=True)
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()
        raise
    _move_outputs(staging, out, result)
    if report:
        result.report = _report(out, result.notes)
    return result


def _move_outputs(staging: Path, out: Path, result: ScanResult) -> None:
    """The scan's outputs, written into ``staging``, replace an earlier scan's in ``out`` (the input validated)."""
    remove_outputs(out)
    for name in OUTPUTS:
        if (staging / name).exists():
            os.rename(staging / name, out / name)
    shutil.rmtree(staging, ignore_errors=True)
    result.out = out
    result.tensorboard = out / TB_NAME if result.tensorboard is not None else None


def check_out(out: Path, inputs: list[Path]) -> None:
    """Refuse an output folder that is, or holds, something the scan reads (``--overwrite`` would delete it)."""
    target = out.resolve()
    for source in inputs:
        real = source.resolve()
        if real == target or target in real.parents:
            how = "is" if real == target else "holds"
            raise ScanInputError(f"--out {out} {how} the input {source}; a scan never writes where it reads "
                                 "(--overwrite would delete it): choose another --out")


def _scan_into(out: Path, path: str | Path, reader: Any, config: Any, columns: ColumnMap, estimator: str | None,
               quiet: bool, console: Any, tensorboard: bool, prefetch: bool | None,
               logged: LoggedMetrics | None = None) -> ScanResult:
    """The scan loop, writing ``monitor.jsonl``, the TensorBoard events and ``run.json`` into ``out`` (the
    staging folder)."""
    result = ScanResult(Path(path), reader.format, out, _config_text(config, reader.declared, estimator),
                        questions=QuestionTally(cap=config.history_cap))
    with OutputDir(out) as folder:
        folder.write(LOG_NAME, b"")  # created fresh (never through a symlink); the JSONL sink appends to it
    sinks = _sinks(out, tensorboard)
    result.tensorboard = out / TB_NAME if len(sinks) > 1 else None
    progress = DelayedProgress(reader.total, reader.unit, f"scanning {reader.format}", quiet, console)
    ahead = _auto_prefetch(reader) if prefetch is None else prefetch
    found: list[str] = []
    steps = prefetched_steps(reader.source, reader.format, columns, config.group_size, found) if ahead else \
        _in_process(reader, config.group_size)
    _feed(steps, config, sinks, result, progress, logged)
    _gather_notes(result, reader.notes + found + logged_notes(logged, result, config.tolerances.mismatch_k3))
    with OutputDir(out) as folder:
        folder.write("run.json", json.dumps({"scanned": str(path), "format": reader.format, **result.config}))
    return result


def _steps_text(first: int, last: int, n: int) -> str:
    """Where the ``n`` steps a part was off lie, in words.

    >>> _steps_text(4, 4, 1), _steps_text(4, 9, 3)
    ('at step 4', 'between steps 4 and 9')
    """
    return f"at step {first}" if n == 1 else f"between steps {first} and {last}"


def _gather_notes(result: ScanResult, read: list[str]) -> None:
    """The readers' notes (the child's reader notes what the parent's did: once each), then the scan's own."""
    notes = [f"INCOMPLETE: an internal fault of the monitor switched its {part!r} part off on {n} of "
             f"{result.steps} step(s) {_steps_text(first, last, n)} (see the log); those steps were not checked"
             for part, (first, last, n) in result.disabled.items()]
    notes += list(dict.fromkeys(read)) + result.notes
    if result.mixed_type_steps:
        notes.append(f"group values of several types ({', '.join(sorted(result.mixed_types))}) in "
                     f"{plural(result.mixed_type_steps, 'step')} from step {result.mixed_first_step}: kept as "
                     "separate groups (1, true and 1.0 are three groups); write the group ids with one type if they "
                     "are one group")
    if result.split_groups:
        notes.append(f"{plural(result.split_groups, 'group')} came from a prompt that held k x group_size rows in "
                     "one step, cut into groups of group_size in row order")
    result.notes = notes


def _config_text(config: Any, declared: dict[str, Any], estimator: str | None) -> dict[str, Any]:
    """The scan's settings as its summary says them (``std_convention``: the estimator's 0.1 key, kept)."""
    source = "option" if estimator is not None else "the run's config" if "estimator" in declared else "default"
    return {"group_size": config.group_size, "estimator": config.estimator, "std_convention": config.estimator,
            "stabilizer": config.stabilizer, "estimator_from": source}


def _auto_prefetch(reader: Any) -> bool:
    """Read ahead in a child process when the input is large (its start costs a fraction of a second)."""
    large = reader.total >= (32 << 20 if reader.unit == "bytes" else 200_000)
    return large and (os.cpu_count() or 1) > 1


def _in_process(reader: Any, group_size: int | None) -> Iterator[tuple[StepInfo, Any]]:
    for rows in reader.steps():
        info = StepInfo(rows.step, rows.num_rows, rows.units, rows.advantages is not None)
        yield info, build_groups(rows, group_size)


def _feed(steps: Iterator[tuple[StepInfo, Any]], config: Any, sinks: list[Any], result: ScanResult,
          progress: DelayedProgress, logged: LoggedMetrics | None = None) -> None:
    """The loop: one step read, grouped, observed and reported at a time."""
    from ...monitor import GRPOMonitor, add_recorded

    monitor = GRPOMonitor(config, sinks=sinks)
    monitor.declare_integration("scan", {"format": result.format})  # the report's no-data notes speak of a scan
    start = time.perf_counter()
    log = logging.getLogger("grpo_monitor")
    level = log.level
    # violations are in the summary, not one log line per step; faults still show
    log.setLevel(max(level, logging.ERROR))
    try:
        with warnings.catch_warnings():  # nor the monitor's warn-once texts
            warnings.filterwarnings("ignore", message="grpo-monitor: step", category=RuntimeWarning)
            for info, groups in steps:
                monitor.observe_rollout(**groups.observe_kwargs())
                if logged is not None and (recorded := logged.for_step(info.step)):
                    add_recorded(monitor, recorded)
                    result.logged_steps += 1
                report = monitor.end_step(step=info.step)
                result.violations.add(report)
                result.questions.update(groups)
                _count(result, info, groups)
                for part in monitor.disabled_parts:  # off for this step: retried on the next one
                    first, _, n = result.disabled.get(part, (info.step, info.step, 0))
                    result.disabled[part] = (first, info.step, n + 1)
                progress.advance(info.units, info.step)
    finally:
        log.setLevel(level)
        progress.close()
        monitor.close()
        result.seconds = time.perf_counter() - start
    if result.steps == 0:
        raise ScanInputError(f"{result.source}: no recorded rows to scan ({result.format} format)")


def _count(result: ScanResult, info: StepInfo, groups: Any) -> None:
    result.steps += 1
    result.rows += info.num_rows
    result.groups += groups.num_groups
    result.advantages = result.advantages or info.has_advantages
    result.first_step = info.step if result.first_step is None else result.first_step
    result.last_step = info.step
    result.split_groups += groups.split_groups
    if groups.mixed_types:
        result.mixed_type_steps += 1
        result.mixed_first_step = info.step if result.mixed_first_step is None else result.mixed_first_step
        result.mixed_types.update(groups.mixed_types)


def _report(out: Path, notes: list[str]) -> Path | None:
    """``report.html`` (and ``plots/``) from the written log; None, with a note, when it cannot be built."""
    if importlib.util.find_spec("matplotlib") is None:
        notes.append("no report.html: it needs matplotlib (`pip install grpo-monitor[plots]`)")
        return None
    from ..reporting import build_report

    try:
        return build_report(out, out)
    except (OSError, ValueError) as exc:
        notes.append(f"no report.html: {exc}")
        return None
