"""The sampler-side metrics a trainer itself logged, read from its recording and mapped onto the monitor's keys.

A scan rebuilds the degenerate rate and the invariants from the recorded rollouts, but the
training–inference mismatch, the entropy and the truncation need token log-probs that no
rollout dump holds. The trainers log them, each under its own name: a scan reads those
scalars from the run's recording — an offline W&B run (``run-*.wandb``), TensorBoard event
files (``events.out.tfevents.*``) or verl's ``file`` logger (JSON Lines of
``{"step": N, "data": {key: value}}``) — and hands them to the monitor under the
``grpo/mismatch/``, ``grpo/entropy/`` and ``grpo/rows/`` keys whose definitions match
(:data:`LOGGED_KEYS`, one entry per framework key). Definitions are unified to the monitor's:
Delta = trainer log-prob minus sampler log-prob per token, ``k1_mean`` = mean of −Delta.
Keys whose definition differs (an importance ratio after truncation or masking, a KL of a
configurable type) are left out and named in :data:`NOT_MAPPED`.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...catalog.trainer_keys import NO_COUNTERPART, TRAINER_KEYS
from ...files.reading import InputFileError, check_regular, loads, open_input, read_input, read_text_blocks
from ..reporting.facts import plural
from .columns import ScanInputError, describe


@dataclasses.dataclass(frozen=True)
class LoggedKey:
    """One framework key that equals a monitor key: where it comes from and how its definition lines up."""

    framework: str
    source: str  # the key as the framework logs it (before a logger's ``train/`` prefix)
    key: str  # the monitor's key
    note: str


#: One entry per framework key a scan reports under a monitor key: derived from the one mapping table,
#: :data:`grpo_monitor.catalog.trainer_keys.TRAINER_KEYS` (records with a ``scan_key``).
LOGGED_KEYS: tuple[LoggedKey, ...] = tuple(LoggedKey(k.framework, k.key, k.scan_key, k.transform)
                                           for k in TRAINER_KEYS.values() if k.scan_key)

#: Framework keys read but not mapped, and why (they stay in the trainer's own dashboards).
NOT_MAPPED: dict[str, str] = NO_COUNTERPART

# --- run health (``grpo-monitor doctor``): the trainer's own summary scalars, read by doctor only -----------
#: A scan never hands these to the monitor (it computes them exactly from the rollouts); doctor reads them
#: where a recording holds no rollouts, and says which figure came from the trainer's scalar.
HEALTH_KEYS: tuple[LoggedKey, ...] = (
    LoggedKey("TRL", "frac_reward_zero_std", "grpo/trl/frac_reward_zero_std",
              "share of groups whose float32 reward std is 0 (a constant non-dyadic reward can read std > 0: "
              "it undercounts degenerate groups)"),
    LoggedKey("TRL", "reward", "grpo/reward/mean", "mean of the summed (weighted) rewards over the batch"),
    LoggedKey("TRL", "completions/mean_length", "grpo/tokens/response_length_mean",
              "mean completion length in tokens, truncated completions included"),
    LoggedKey("verl", "critic/score/mean", "grpo/reward/mean", "mean sequence score over the batch"),
    LoggedKey("verl", "response_length/mean", "grpo/tokens/response_length_mean", "mean response length in tokens"),
)
# --- end of run health --------------------------------------------------------------------------------------

_BY_SOURCE = {k.source: k for k in LOGGED_KEYS}
#: What a logger puts before the framework's key (transformers' ``rewrite_logs``, NeMo-RL's logger).
_PREFIXES = ("train/",)
_EVENTS = "events.out.tfevents*"


def monitor_key(tag: str, by_source: dict[str, LoggedKey] | None = None) -> LoggedKey | None:
    """The mapping of a logged tag (with or without a logger's ``train/`` prefix), or None.

    >>> monitor_key("train/rollout_corr/k3_kl").key
    'grpo/mismatch/k3_mean'
    >>> monitor_key("eval/entropy") is None
    True
    """
    table = _BY_SOURCE if by_source is None else by_source
    for prefix in ("", *_PREFIXES):
        if tag.startswith(prefix) and (entry := table.get(tag[len(prefix):])) is not None:
            return entry
    return None


@dataclasses.dataclass
class LoggedMetrics:
    """The mapped values per logged step, and which framework keys gave them."""

    source: Path
    kind: str  # "wandb", "tensorboard" or "jsonl"
    by_step: dict[int, dict[str, float]] = dataclasses.field(default_factory=dict)
    found: dict[str, LoggedKey] = dataclasses.field(default_factory=dict)  # logged tag -> mapping
    notes: list[str] = dataclasses.field(default_factory=list)  # what the reading skipped, and why
    by_source: dict[str, LoggedKey] | None = None  # the mapping read (None: LOGGED_KEYS)

    def add(self, step: Any, tag: str, value: Any) -> None:
        """Keep ``value`` for ``step`` when ``tag`` maps to a monitor key and both are finite numbers (a NaN, an
        infinite or a float-overflowing number is no measurement, as the W&B and TensorBoard readers see it)."""
        entry, number, at = self.lookup(tag), _finite(value), _finite(step)
        if entry is None or number is None or at is None:
            return
        self.found.setdefault(tag, entry)
        self.by_step.setdefault(int(at), {})[entry.key] = number

    def lookup(self, tag: str) -> LoggedKey | None:
        """The mapping of a logged tag (:func:`monitor_key` over the keys read; a subclass may map other keys)."""
        return monitor_key(tag, self.by_source)

    def for_step(self, step: int) -> dict[str, float]:
        """The mapped values logged at ``step`` ({} when none)."""
        return self.by_step.get(step, {})


def read_logged(path: str | Path, keys: tuple[LoggedKey, ...] | None = None, *,
                cls: type[LoggedMetrics] | None = None) -> LoggedMetrics:
    """The mapped sampler-side metrics of a recording at ``path``: an offline W&B run folder (or a folder
    holding one), a TensorBoard events file or a folder holding some, or a JSON Lines metrics log.

    ``keys``: the mapping to read (default :data:`LOGGED_KEYS`; doctor adds :data:`HEALTH_KEYS`); ``cls``: a
    subclass that maps other keys (its ``lookup``)."""
    p, by_source = Path(path), None if keys is None else {k.source: k for k in keys}

    def make(root: Path, kind: str) -> LoggedMetrics:
        return (cls or LoggedMetrics)(root, kind, by_source=by_source)

    if not p.exists():
        raise ScanInputError(f"--metrics {p}: no such file or folder")
    run = _wandb_run(p) if p.is_dir() else None
    if run is not None:
        return _from_wandb(run, make)
    events = [p] if p.is_file() and p.name.startswith("events.out.tfevents") else sorted(p.rglob(_EVENTS)) \
        if p.is_dir() else []
    if events:
        return _from_tensorboard(p, events, make)
    if p.is_file():
        return _from_jsonl(p, make)
    raise ScanInputError(f"--metrics {p}: expected an offline W&B run folder (run-*.wandb), TensorBoard event files "
                         "(events.out.tfevents.*) or a JSON Lines metrics log, but found none of them")


def _wandb_run(path: Path) -> Path | None:
    """The W&B run folder ``path`` is or holds (itself, ``*run-*/`` or ``wandb/*run-*/``); None when none."""
    if any(path.glob("run-*.wandb")):
        return path
    runs = sorted({r for base in (path, path / "wandb") for r in base.glob("*run-*")
                   if r.is_dir() and not r.is_symlink() and any(r.glob("run-*.wandb"))})
    if len(runs) > 1:
        raise ScanInputError(f"--metrics {path} holds {len(runs)} W&B runs ({', '.join(map(str, runs[:5]))}); "
                             "pass one run folder")
    return runs[0] if runs else None


def _from_wandb(run: Path, cls: Callable[[Path, str], LoggedMetrics]) -> LoggedMetrics:
    from ...sinks.wandb_reader import history_rows, read_wandb_records

    wandb_file = sorted(run.glob("run-*.wandb"))[-1]
    check_regular(wandb_file, run)
    try:
        records = read_wandb_records(wandb_file)
    except ValueError as exc:  # a bad header, checksum or record (the text names the file)
        raise ScanInputError(f"--metrics {exc}") from None
    try:
        rows = history_rows(records)
    except ValueError as exc:  # a value too deep, out of range or not JSON (the text names the item)
        raise ScanInputError(f"--metrics {wandb_file}: {exc}") from None
    out = cls(run, "wandb")
    for row in rows:
        step = row.get("train/global_step", row.get("_step"))  # transformers logs the trainer's step beside
        for tag, value in _flat(row):
            out.add(step, tag, value)
    return out


def _finite(value: Any) -> float | None:
    """``value`` as a finite float; None for anything else (a bool, a string, NaN, inf, an int past float range).

    >>> _finite(3), _finite(True), _finite(float("nan")), _finite(10 ** 400)
    (3.0, None, None, None)
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _flat(row: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in row.items():
        if isinstance(value, dict) and not value.get("_type"):
            yield from _flat(value, f"{prefix}{key}/")
        else:
            yield f"{prefix}{key}", value


def _from_tensorboard(root: Path, events: list[Path], cls: Callable[[Path, str], LoggedMetrics]) -> LoggedMetrics:
    """Every intact record of each event file (:mod:`.tfevents`); a damaged stretch is skipped with a note."""
    if importlib.util.find_spec("tensorboard") is None:
        raise ScanInputError(f"--metrics {root}: reading TensorBoard event files needs the `tensorboard` package "
                             "(`pip install grpo-monitor[tensorboard]`)")
    out = cls(root, "tensorboard")
    for path in events:
        _read_event_file(path, root if root.is_dir() else None, out)
    return out


def _read_event_file(path: Path, folder: Path | None, out: LoggedMetrics) -> None:
    from .tfevents import Damage, lost_note, parse_event, records, scalar

    damaged: list[tuple[Damage, int | None]] = []  # each with the last step read before it
    step: int | None = None
    for item in records(read_input(path, folder), path):
        if isinstance(item, Damage):
            damaged.append((item, step))
            continue
        index, offset, body = item
        event = parse_event(body, path, index, offset)
        for value in event.summary.value:
            if out.lookup(value.tag) is not None:
                out.add(event.step, value.tag, scalar(value, path, index, offset))
        if event.HasField("summary"):
            for damage, before in damaged:
                out.notes.append(lost_note(path, damage, before, event.step))
            damaged, step = [], event.step
    out.notes += [lost_note(path, damage, before, None) for damage, before in damaged]


def _from_jsonl(path: Path, cls: Callable[[Path, str], LoggedMetrics]) -> LoggedMetrics:
    """verl's ``file`` logger (``{"step": N, "data": {...}}`` per line) or flat records with a ``step``."""
    out = cls(path, "jsonl")
    for number, raw in _lines(path):  # bounded: the line and file limits, linear in a long line
        try:
            record = loads(raw, f"--metrics {path}", number)  # too deep or out of range: worded
        except json.JSONDecodeError as exc:
            raise ScanInputError(f"--metrics {path}, line {number}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict) or "step" not in record:
            raise ScanInputError(f"--metrics {path}, line {number}: expected a record with a \"step\" (verl's "
                                 f"file logger writes {{\"step\": N, \"data\": {{...}}}}), but got "
                                 f"{describe(record)}")
        data = record["data"] if isinstance(record.get("data"), dict) else record
        for tag, value in data.items():
            out.add(record["step"], tag, value)
    return out


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of the non-blank lines of a regular file, read within the line and file limits."""
    with open_input(path) as f:
        for text, first, _, _ in read_text_blocks(f, f"--metrics {path}"):
            for offset, line in enumerate(text.split("\n")):
                if line.strip():
                    yield first + offset, line


def recorded_metrics(metrics: str | Path | None, reader: Any) -> LoggedMetrics | None:
    """The run's logged sampler-side metrics: from ``metrics``, else from the scanned W&B run itself."""
    if metrics is not None:
        return read_logged(metrics)
    if reader.format == "trl-wandb" and any(Path(reader.source).glob("run-*.wandb")):
        try:
            return read_logged(reader.source)
        except (InputFileError, ImportError) as exc:  # the tables are still scanned
            reader.notes.append(f"the W&B run's logged metrics could not be read: {exc}")
    return None


def logged_notes(logged: LoggedMetrics | None, result: Any, mismatch_k3: float) -> list[str]:
    """What the logged metrics gave: the keys mapped, logged steps no recorded rollout matched, and the steps
    whose recorded ``grpo/mismatch/k3_mean`` is above ``mismatch_k3`` (the same quantity the invariant tests;
    a note, not a violation: the token log-probs are not there to tell the cause)."""
    if logged is None:
        return []
    result.logged_keys = {tag: entry.key for tag, entry in sorted(logged.found.items())}
    if not logged.found:
        return [*logged.notes, f"{logged.source}: no sampler-side metric the monitor maps (docs/scan.md, \"The "
                "trainer's own metrics\")"]
    keys = ", ".join(f"{tag} -> {key}" for tag, key in result.logged_keys.items())
    notes = [*logged.notes, f"the trainer's logged metrics ({logged.kind}, {logged.source}) reported under the "
             f"monitor's keys at {plural(result.logged_steps, 'step')}: {keys}"]
    missed = len(logged.by_step) - result.logged_steps
    if missed > 0:
        notes.append(f"{plural(missed, 'step')} of the logged metrics have no recorded rollouts and are not shown")
    high = sorted(s for s, m in logged.by_step.items() if m.get("grpo/mismatch/k3_mean", 0.0) > mismatch_k3)
    if high:
        from .summary import step_ranges

        notes.append(f"the recorded mismatch KL (k3) is above mismatch_k3 = {mismatch_k3:g} nats per token at "
                     f"{plural(len(high), 'step')}: {step_ranges(high)}; numerical noise stays below it "
                     "(docs/mismatch.md): a sampler lagging the trainer, log-probs before temperature, shifted "
                     "tokens or another model's log-probs")
    return notes
