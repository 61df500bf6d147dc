"""What ``grpo-monitor doctor`` reads: one metrics dict per step, from whatever the run recorded.

Four kinds of recording, told apart by their files:

- a grpo-monitor log (``monitor.jsonl``, a run folder holding one): the monitor's own keys, and the
  ``health`` records a live run wrote;
- recorded rollouts ``scan`` reads (verl's dumps, TRL's completions tables in an offline W&B run or
  as Parquet, generic JSONL/Parquet): replayed through the monitor (:func:`grpo_monitor.tools.scan.scan_rollouts`,
  into a temporary folder), so group counts are exact; the trainer's logged scalars of the same W&B run
  (or ``--metrics``) fill in what rollouts do not hold (truncation, entropy, mismatch);
- the trainer's logged scalars only (TensorBoard events, verl's ``file`` logger JSONL, a W&B run
  without tables): mapped onto the monitor's keys (:mod:`grpo_monitor.tools.scan.logged`), TRL's
  ``frac_reward_zero_std`` standing in for the degenerate rate, which it undercounts.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ...files.reading import InputFileError, first_line, loads
from ..scan.columns import ScanInputError

#: The monitor's exact degenerate rate, and TRL's float32 stand-in for it.
DEGENERATE, TRL_ZERO_STD = "grpo/groups/degenerate_rate", "grpo/trl/frac_reward_zero_std"
TRUNCATED, VALID, ENTROPY = "grpo/rows/truncated_rate", "grpo/tokens/valid", "grpo/entropy/mean"


@dataclasses.dataclass
class Recording:
    """One run's per-step metrics as doctor feeds them to the health tracker."""

    source: Path
    kind: str  # "monitor log", "scan log", "rollouts (<format>)", "logged scalars (<wandb|tensorboard|jsonl>)"
    steps: dict[int, dict[str, float]] = dataclasses.field(default_factory=dict)
    integration: str = "api"
    #: the ``health`` record a live run wrote per step ({} when the log predates run health)
    health: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)  # the trainer's config, where recorded
    #: where the group counts come from: "rollouts" (exact), "trl scalar" (frac_reward_zero_std) or "" (none)
    groups_from: str = ""
    logged: dict[str, str] = dataclasses.field(default_factory=dict)  # trainer tag -> monitor key read
    notes: list[str] = dataclasses.field(default_factory=list)

    def keys(self) -> set[str]:
        """Every metric key some step holds."""
        return {k for metrics in self.steps.values() for k in metrics}


def read_recording(path: str | Path, *, metrics: str | Path | None = None, fmt: str = "auto",
                   group_size: int | None = None) -> Recording:
    """The :class:`Recording` of ``path`` (see the module docstring); a worded :class:`ScanInputError` when
    ``path`` is none of them. ``metrics`` adds a recording of the trainer's logged scalars."""
    p = Path(path)
    if not p.exists():
        raise ScanInputError(f"RUN {p}: no such file or folder")
    log = _monitor_log(p)
    if log is not None:
        return _from_monitor_log(log)
    if fmt == "auto" and _scalars_only(p):
        recording = _from_scalars(p)
    else:
        recording = _from_rollouts(p, fmt, group_size, metrics)
        metrics = None
    if metrics is not None:
        _merge_logged(recording, Path(metrics))
    _stand_ins(recording)
    return recording


def _first_record(path: Path) -> Any:
    try:
        number, raw = first_line(path)
        return loads(raw, path, number) if raw.strip() else None
    except (InputFileError, ValueError, OSError):
        return None


def _monitor_log(p: Path) -> Path | None:
    """The grpo-monitor log ``p`` is or holds (a record with ``"metrics"``), else None."""
    from ..reporting.data import LOG_NAMES

    candidates = [p] if p.is_file() and p.suffix == ".jsonl" else [p / n for n in LOG_NAMES] if p.is_dir() else []
    for candidate in candidates:
        record = _first_record(candidate) if candidate.is_file() else None
        if isinstance(record, dict) and isinstance(record.get("metrics"), dict) and "step" in record:
            return candidate
    return None


def _scalars_only(p: Path) -> bool:
    """Whether ``p`` holds the trainer's logged scalars and no rollouts ``scan`` reads."""
    from ..scan.detect import detect_format, wandb_run_folder

    if p.is_file():
        record = _first_record(p) if p.suffix == ".jsonl" else None
        return p.name.startswith("events.out.tfevents") or (isinstance(record, dict) and "data" in record)
    try:
        if wandb_run_folder(p) is not None:
            return False
        detect_format(p)
    except ScanInputError:
        return any(p.rglob("events.out.tfevents*")) or any(p.rglob("run-*.wandb"))
    return False


def _from_monitor_log(log: Path) -> Recording:
    from ..reporting.records import read_step_records

    out = Recording(log, "monitor log", groups_from="rollouts")
    for record in read_step_records(log):
        step = int(record["step"])
        out.steps.setdefault(step, {}).update({k: float(v) for k, v in record["metrics"].items()
                                              if isinstance(v, (int, float)) and not isinstance(v, bool)})
        if isinstance(record.get("health"), dict):
            out.health[step] = record["health"]
        run = record.get("run")
        if isinstance(run, dict):
            out.integration = str(run.get("integration") or out.integration)
            settings = run.get("settings")
            out.settings = settings if isinstance(settings, dict) else out.settings
    if not out.steps:
        raise ScanInputError(f"RUN {log}: holds no step records")
    if not any(DEGENERATE in m for m in out.steps.values()):
        out.groups_from = ""
    if out.integration == "scan":  # a scan's output: the trainer is the scanned format's
        out.kind, out.integration = "scan log", _trainer_of(_scanned_format(log.parent))
        for values in out.steps.values():  # the replay's own verdict figures: doctor recomputes them
            for key in [k for k in values if k.startswith("grpo/health/")]:
                del values[key]
    return out


def _scanned_format(folder: Path) -> str:
    """The format a scan's ``run.json`` records ("" when none)."""
    record = _first_record(folder / "run.json") if (folder / "run.json").is_file() else None
    return str(record.get("format", "")) if isinstance(record, dict) else ""


def _trainer_of(fmt: str) -> str:
    """The integration whose options a scanned format's remedies name."""
    return "trl" if fmt.startswith("trl") else "verl" if fmt == "verl" else "api"


def _from_scalars(p: Path) -> Recording:
    from ..scan.logged import HEALTH_KEYS, LOGGED_KEYS, read_logged

    try:
        logged = read_logged(p, LOGGED_KEYS + HEALTH_KEYS)
    except ScanInputError as exc:
        raise ScanInputError(str(exc).replace("--metrics ", "RUN ", 1)) from None
    out = Recording(p, f"logged scalars ({logged.kind})", steps={s: dict(m) for s, m in logged.by_step.items()})
    out.logged = {tag: entry.key for tag, entry in sorted(logged.found.items())}
    out.integration = _integration(logged.found.values())
    out.settings = _wandb_config(p) if logged.kind == "wandb" else _tensorboard_args(p) \
        if logged.kind == "tensorboard" else {}
    if not out.steps:
        raise ScanInputError(f"RUN {p}: a {logged.kind} recording with none of the trainer keys doctor reads "
                             f"({', '.join(sorted({k.source for k in LOGGED_KEYS + HEALTH_KEYS}))})")
    return out


def _integration(entries: Any) -> str:
    frameworks = {e.framework for e in entries}
    return "trl" if "TRL" in frameworks else "verl" if "verl" in frameworks else "api"


def _wandb_config(p: Path) -> dict[str, Any]:
    """The trainer's config a W&B run folder (or a folder holding one run) recorded ({} when none)."""
    from ..scan.trl_tables import wandb_run_meta

    runs = [p] if any(p.glob("run-*.wandb")) else [r for base in (p, p / "wandb") for r in base.glob("*run-*")
                                                   if r.is_dir() and any(r.glob("run-*.wandb"))]
    return wandb_run_meta(runs[0]).get("config", {}) if len(runs) == 1 else {}


def _tensorboard_args(p: Path) -> dict[str, Any]:
    """The ``args`` text transformers' TensorBoard callback writes (the trainer's config as JSON; {} when none)."""
    import json

    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    for path in [p] if p.is_file() else sorted(p.rglob("events.out.tfevents*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.tag.startswith("args") and value.WhichOneof("value") == "tensor":
                    try:
                        args = json.loads(value.tensor.string_val[0].decode())
                    except (ValueError, IndexError, UnicodeDecodeError):
                        continue
                    return args if isinstance(args, dict) else {}
    return {}


def _from_rollouts(p: Path, fmt: str, group_size: int | None, metrics: str | Path | None) -> Recording:
    """Replay the rollouts through the monitor (``scan``) into a temporary folder and read its log back."""
    from ..scan import scan_rollouts

    staging = Path(tempfile.mkdtemp(prefix="grpo-monitor-doctor-"))
    try:
        result = scan_rollouts(p, staging / "scan", fmt=fmt, group_size=group_size, quiet=True, report=False,
                               tensorboard=False, metrics=metrics)
        out = _from_monitor_log(result.log)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    out.source, out.kind = p, f"rollouts ({result.format})"
    out.logged = dict(result.logged_keys)
    out.integration = _trainer_of(result.format)
    out.notes += [n for n in result.notes if not n.startswith("the trainer's logged metrics")]
    if metrics is None and p.is_dir():
        _beside(out, p, result.format)
    return out


def _beside(out: Recording, p: Path, fmt: str) -> None:
    """The trainer's scalars recorded with the rollouts: the W&B run's own, or TensorBoard events in TRL's output
    folder (``<output_dir>/runs/``, one folder of them)."""
    from ..scan.detect import wandb_run_folder

    if fmt == "trl-wandb":
        run = wandb_run_folder(p)
        if run is not None and any(run.glob("run-*.wandb")):
            out.settings = _wandb_config(run)
            _merge_logged(out, run)
    elif fmt == "trl-parquet":
        folders = {e.parent for e in p.rglob("events.out.tfevents*")}
        if len(folders) == 1:
            (events,) = folders
            out.settings = _tensorboard_args(events)
            _merge_logged(out, events)
            out.notes.append(f"the trainer's logged scalars read from {events}")


def _merge_logged(out: Recording, source: Path) -> None:
    """The trainer's own scalars of ``source`` fill in the keys the rollouts did not give (never replace them)."""
    from ..scan.logged import HEALTH_KEYS, LOGGED_KEYS, read_logged

    logged = read_logged(source, LOGGED_KEYS + HEALTH_KEYS)
    for step, values in logged.by_step.items():
        if step in out.steps:
            for key, value in values.items():
                out.steps[step].setdefault(key, value)
    out.logged.update({tag: entry.key for tag, entry in logged.found.items()})


def _stand_ins(out: Recording) -> None:
    """What the trainer's scalars tell exactly, and where TRL's ``frac_reward_zero_std`` stands in (said so)."""
    _masked_truncation(out)
    if any(DEGENERATE in m for m in out.steps.values()):
        out.groups_from = out.groups_from or "rollouts"
        return
    if any(TRL_ZERO_STD in m for m in out.steps.values()):
        out.groups_from = "trl scalar"
        for metrics in out.steps.values():
            if TRL_ZERO_STD in metrics:
                metrics[DEGENERATE] = metrics[TRL_ZERO_STD]
        out.notes.append("degenerate groups from TRL's logged frac_reward_zero_std, not from the rollouts: TRL "
                         "takes the float32 std of each group's rewards, so a constant reward that is not a "
                         "dyadic fraction (0.7, 1/3) reads std > 0 and the share undercounts degenerate groups "
                         "(2% logged where 36% were constant on a real run); the saturated/unsolved split is "
                         "unknown. Record the rollouts (TRL log_completions=True) for exact counts")


def _masked_truncation(out: Recording) -> None:
    """Under TRL's ``mask_truncated_completions=True`` a step whose completions were all truncated
    (``completions/clipped_ratio`` = 1, a count over the batch) has no valid loss token: ``grpo/tokens/valid`` = 0
    there, exactly; other steps' count is not recorded and stays absent."""
    if out.settings.get("mask_truncated_completions") is not True or VALID in out.keys():
        return
    zero = [s for s, m in out.steps.items() if m.get(TRUNCATED) == 1.0]
    for step in zero:
        out.steps[step][VALID] = 0.0
        out.steps[step].pop(ENTROPY, None)  # TRL's masked mean over no token reads 0: no measurement
    out.notes.append(f"valid loss tokens: 0 at the {len(zero)} step(s) whose completions were all truncated "
                     "(completions/clipped_ratio = 1 under mask_truncated_completions=True; TRL's entropy there, a "
                     "mean over no token, is left out); not recorded at the other steps")
