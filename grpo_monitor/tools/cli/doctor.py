"""``grpo-monitor doctor RUN``: is the run learning? The run-health findings of a finished run.

Exit codes: 0 when the diagnosis ran (findings are reported, not fatal); 1 with ``--fail-on degraded``
when the run's status was degraded or stalled at some step, with ``--fail-on stalled`` when it was
stalled; 2 when RUN cannot be read or an option is wrong (the message names the file and the field).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from . import add_read_limits, fail, printable, read_limits
from .scan import FORMATS  # scan's formats: one list (the CLI module, light; not grpo_monitor.tools.scan)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``doctor`` on the ``grpo-monitor`` subparsers."""
    parser = subparsers.add_parser(
        "doctor",
        help="is the run learning? run-health findings (stalled, wasted, collapsing) of a finished run",
        description="Read what a run recorded — a grpo-monitor log, recorded rollouts (verl dumps, TRL "
        "completions tables in an offline W&B run or as Parquet) or the trainer's own logged scalars (TRL's W&B "
        "offline run or TensorBoard events, verl's file logger JSONL) — and fold it step by step through the "
        "run-health tracker a live run uses. Prints each finding with its evidence and the trainer options that "
        "address it, and the findings this recording cannot support, with the reason. Exit code 1 with "
        "--fail-on when the run reached that status (for CI), 2 when RUN cannot be read.",
    )
    parser.add_argument("run", metavar="RUN", help="a grpo-monitor log (monitor.jsonl or its folder), recorded "
                        "rollouts scan reads, an offline W&B run folder, TensorBoard event files (a file or a "
                        "folder), or verl's file logger JSONL")
    parser.add_argument("--fail-on", choices=("degraded", "stalled"), default=None,
                        help="exit 1 when the run's status reached this at some step (degraded: degraded or "
                        "stalled); default: exit 0 whatever was found")
    parser.add_argument("--json", action="store_true", help="print the diagnosis as one JSON object")
    parser.add_argument("--out", default=None, metavar="FILE",
                        help="also write the JSON diagnosis to FILE (never over RUN; an existing FILE only with "
                        "--overwrite)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out FILE")
    parser.add_argument("--metrics", default=None, metavar="RECORDING",
                        help="the run's logged scalars beside recorded rollouts (an offline W&B run, TensorBoard "
                        "events, verl's file logger JSONL): truncation, entropy and mismatch come from them")
    parser.add_argument("--format", default="auto", choices=FORMATS, help="rollout format (default: detected)")
    parser.add_argument("--group-size", "-G", type=int, default=None, help="responses per prompt G, for rollouts "
                        "without a group column")
    add_read_limits(parser)
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Diagnose; print it; the exit code."""
    from ...files.reading import InputFileError
    from ..doctor import diagnose, fails, format_diagnosis, read_recording

    try:
        out = _out_path(args)
        with read_limits(args):
            diagnosis = diagnose(read_recording(args.run, metrics=args.metrics, fmt=args.format,
                                                group_size=args.group_size))
    except (InputFileError, OSError, ValueError) as exc:  # ScanInputError and LogFormatError are ValueErrors
        return fail("doctor", exc)
    record = json.dumps(diagnosis.to_dict(), indent=None if args.json else 2)
    if out is not None:
        try:
            _write(out, record, args.overwrite)
        except OSError as exc:
            return fail("doctor", f"--out {out}: {exc}")
    print(record if args.json else printable(format_diagnosis(diagnosis)))
    return 1 if fails(diagnosis, args.fail_on) else 0


def _out_path(args: argparse.Namespace) -> Path | None:
    """``--out``, refused when it is, or lies inside, something doctor reads, or exists without ``--overwrite``."""
    if args.out is None:
        return None
    out = Path(args.out)
    target = out.resolve()
    for source in (args.run, args.metrics):
        real = Path(source).resolve() if source is not None else None
        if real is not None and (real == target or real in target.parents):
            raise ValueError(f"--out {out} is inside the input {source}; doctor never writes where it reads: "
                             "choose another --out")
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder; expected a file name for the JSON diagnosis")
    if (out.exists() or out.is_symlink()) and not args.overwrite:
        raise ValueError(f"--out {out} already exists; pass --overwrite to replace it, or another --out")
    return out


def _write(out: Path, text: str, overwrite: bool) -> None:
    """Write atomically (a temporary file renamed over it); never through a symlink."""
    import os
    import tempfile

    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".doctor-", dir=out.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text + "\n")
        if out.is_symlink():
            out.unlink()
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
