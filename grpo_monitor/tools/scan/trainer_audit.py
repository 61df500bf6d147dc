"""``grpo-monitor scan RECORDING --monitor-log LOG``: a trainer's recording audited against a grpo-monitor log.

The trainer's logged keys (``TRAINER_KEYS`` records whose exact counterpart is a monitor key, e.g. TRL's
``frac_reward_zero_std`` -> ``grpo/groups/degenerate_rate``) are read from the recording (an offline W&B run,
TensorBoard events, a JSON Lines log) and compared step by step with the monitor log's values, the same way the
live audit does (:mod:`grpo_monitor.step.trainer_audit`).
"""

from __future__ import annotations

from pathlib import Path

from ...catalog.trainer_keys import TRAINER_KEYS
from ...sinks.jsonl import read_jsonl
from ...step.trainer_audit import AuditContext, AuditRequest, AuditRow, audit_rows
from .columns import ScanInputError
from .logged import LoggedKey, LoggedMetrics, read_logged

_OFFLINE = {k.key: k for k in TRAINER_KEYS.values() if k.quantity != "exact"}


class TrainerValues(LoggedMetrics):
    """A recording's values of every trainer key with a monitor-key counterpart, kept under the trainer's key."""

    def lookup(self, tag: str) -> LoggedKey | None:
        key = tag.removeprefix("train/")
        record = _OFFLINE.get(key)
        return None if record is None else LoggedKey(record.framework, key, key, record.transform)


def audit_recording(recording: str | Path, monitor_log: str | Path) -> list[tuple[int, AuditRow]]:
    """(step, row) for every step both hold; ScanInputError when the log is missing or nothing lines up."""
    log = Path(monitor_log)
    if not log.is_file():
        raise ScanInputError(f"--monitor-log {log}: no such file; expected the grpo-monitor JSONL log of the run")
    monitor = {int(r["step"]): r.get("metrics") or {} for r in read_jsonl(log) if isinstance(r, dict) and "step" in r}
    logged = read_logged(recording, cls=TrainerValues)
    out = []
    for step, values in sorted(logged.by_step.items()):
        if step not in monitor:
            continue
        for key, value in values.items():
            req = AuditRequest(_OFFLINE[key].framework, {key: value}, {}, AuditContext())
            out += [(step, row) for row in audit_rows([req], monitor[step])]
    if not out:
        raise ScanInputError(f"{recording} and --monitor-log {log} share no step with an audited key (docs/"
                             "trainer_metrics.md lists them)")
    return out


def format_audit(rows: list[tuple[int, AuditRow]]) -> str:
    """One line per mismatched (step, key), then the count."""
    off = [(s, r) for s, r in rows if r.mismatched]
    lines = [f"step {s}: {r.framework} logged {r.key} = {r.trainer:.6g}, exact {r.exact:.6g} ({r.cause})"
             for s, r in off]
    lines.append(f"trainer metrics: {len(rows)} compared, {len(off)} off beyond their tolerance "
                 "(docs/trainer_metrics.md)")
    return "\n".join(lines)
