"""``grpo-monitor scan PATH``: audit a finished run from the rollouts it recorded.

Exit code 0 when the scan ran (violations are reported, not fatal), 1 with
``--fail-on-error`` when an error-severity invariant broke, 2 when the records cannot be
read (the message names the file, the line and the field).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from . import add_read_limits, fail, printable, read_limits

#: Kept here (not imported from grpo_monitor.tools.scan): building the parser imports nothing heavy.
FORMATS = ("auto", "verl", "trl-wandb", "trl-parquet", "jsonl", "parquet")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``scan`` on the ``grpo-monitor`` subparsers."""
    parser = subparsers.add_parser(
        "scan",
        help="audit a finished run from its recorded rollouts (verl dumps, TRL completions tables, JSONL, Parquet)",
        description="Read the rollouts a run recorded, step by step (memory holds one step), rebuild the groups "
        "and feed each step through the same monitor a live run uses. Writes monitor.jsonl, TensorBoard events "
        "and report.html to --out, and prints a summary: degenerate rate (start against end, as the report compares "
        "them) against the iid prediction, effective prompts, stuck and saturated questions, violations by step.",
    )
    parser.add_argument("path", metavar="PATH", help="verl's rollout_data_dir, an offline W&B run folder (TRL "
                        "log_completions), TRL's completions/ folder, or JSONL / Parquet files (a file or a folder)")
    parser.add_argument("--format", default="auto", choices=FORMATS, help="input format (default: detected)")
    parser.add_argument("--group-size", "-G", type=int, default=None,
                        help="responses per prompt G: declared to the monitor, cuts a prompt drawn k times in one "
                        "step into k groups, and groups consecutive rows when there is no group column")
    parser.add_argument("--estimator", default=None, metavar="NAME|MODULE:FUNCTION",
                        help="the estimator the advantages should follow: auto or a name of grpo_monitor.ESTIMATORS "
                        "(population, bessel, trl.group, verl.grpo, nemo_rl.grpo, ...), or MODULE:FUNCTION, your own "
                        "rewards (B, G) -> advantages (B, G) replayed as the reference; default: the run's own "
                        "config when recorded, else auto")
    parser.add_argument("--columns", default=None, metavar="KEY=FIELD,...",
                        help="field names: step=...,group=...,reward=...(a+b sums),advantage=...,question=...")
    parser.add_argument("--metrics", default=None, metavar="RECORDING",
                        help="the run's logged scalars (an offline W&B run, TensorBoard event files, verl's file "
                        "logger JSONL): the sampler-side keys it holds (TRL sampling/*, verl rollout_corr/*, "
                        "NeMo-RL token_mult_prob_error, entropy, truncation) are reported under grpo/mismatch/, "
                        "grpo/entropy/, grpo/rows/; a TRL W&B run scanned for its tables is read for them by itself")
    parser.add_argument("--monitor-log", default=None, metavar="LOG",
                        help="a grpo-monitor JSONL log of the same run: PATH is then the trainer's recording (an "
                        "offline W&B run, TensorBoard events, verl's file logger JSONL), and its own metrics are "
                        "compared step by step with the log's exact values (docs/trainer_metrics.md); no scan")
    parser.add_argument("--out", default=None, help="output folder (default: ./scan-<name of PATH>)")
    parser.add_argument("--overwrite", action="store_true", help="replace the outputs of an earlier scan in --out")
    parser.add_argument("--fail-on-error", action="store_true",
                        help="exit 1 when an error-severity invariant broke (for CI)")
    parser.add_argument("--no-report", action="store_true", help="skip report.html (and its plots)")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar and no summary (for CI)")
    add_read_limits(parser)
    parser.set_defaults(func=run)
    return parser


def default_out(path: str) -> Path:
    """``./scan-<name>``, the name of the scanned file or folder."""
    p = Path(path).resolve()
    return Path.cwd() / f"scan-{p.stem if p.is_file() else p.name}"


def run(args: argparse.Namespace) -> int:
    """Scan; print the summary; the exit code."""
    from ...files.reading import InputFileError
    from ..reporting.facts import plural
    from ..scan import format_summary, parse_columns, scan_rollouts

    if args.monitor_log is not None:
        return _audit(args)
    try:
        with read_limits(args):
            result = scan_rollouts(
                args.path, args.out or default_out(args.path), fmt=args.format, group_size=args.group_size,
                estimator=args.estimator, columns=parse_columns(args.columns), overwrite=args.overwrite,
                quiet=args.quiet, report=not args.no_report, metrics=args.metrics,
            )
    except (InputFileError, OSError) as exc:  # ScanInputError is an InputFileError
        return fail("scan", exc)
    if not args.quiet:
        print(printable(format_summary(result)))
    elif result.errors:
        print(printable(f"grpo-monitor scan: {plural(result.errors, 'invariant')} broken with error severity; see "
                        f"{result.log}"))
    return 1 if args.fail_on_error and result.errors else 0


def _audit(args: argparse.Namespace) -> int:
    """``--monitor-log``: the trainer's recording at ``path`` against the monitor's log; the findings printed."""
    from ...files.reading import InputFileError
    from ..scan.trainer_audit import audit_recording, format_audit

    try:
        with read_limits(args):
            rows = audit_recording(args.path, args.monitor_log)
    except (InputFileError, OSError) as exc:
        return fail("scan", exc)
    print(printable(format_audit(rows)))
    return 0
