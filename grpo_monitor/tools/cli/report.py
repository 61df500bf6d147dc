"""``grpo-monitor report RUN``: PNG figures and one self-contained HTML page from a JSONL log."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Any

from . import add_read_limits, fail, missing_extra, printable, read_limits


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``report`` on the ``grpo-monitor`` subparsers."""
    parser = subparsers.add_parser(
        "report",
        help="PNG figures and a self-contained HTML page from a run's JSONL log",
        description="Read a run's JSONL log (RUN is the run folder or the .jsonl file) and write plots/*.png "
        "and report.html (images inlined, no external assets): one figure per metric family the run logged "
        "(degenerate groups against the iid prediction, effective prompts, per-question reward std, advantage "
        "invariants, estimator and stabilizer, overdispersion and stuck questions, KL estimators, "
        "importance ratio and clipping, off-policy rows (ages and the staleness drop; only for runs that log "
        "them), training-inference mismatch, truncation and the degenerate split, entropy, "
        "response length and live tokens, loss weights (length and questions), dynamic sampling ledger, "
        "violations), captions computed from this run's own numbers, the run-level observed-vs-iid line, where "
        "the run's TensorBoard, W&B and JSONL files are, and, for each family the run did not log, what to set "
        "in the trainer the run came from to get it.",
    )
    parser.add_argument("run", metavar="RUN", help="run folder holding monitor.jsonl, or a JSONL file")
    parser.add_argument("--out", default=None, help="output folder (default: the run folder)")
    add_read_limits(parser)
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Build the report; exit code 2 when the log is missing, unreadable or not a log of step records, 3 without
    matplotlib. An earlier report.html in the output folder is replaced, and said so.

    A record of the wrong shape is named by file and line (``reporting.records.LogFormatError``).
    """
    if importlib.util.find_spec("matplotlib") is None:
        return missing_extra("report", "the report (its figures)", "matplotlib", "plots")
    from ..reporting import build_report

    earlier = _earlier_report(args)

    try:
        with read_limits(args):
            page = build_report(args.run, args.out)
    except (OSError, ValueError) as exc:  # LogFormatError and InputFileError are ValueErrors
        return fail("report", exc)
    print(printable(f"report: {page}" + (" (replaced the earlier report.html and plots/)" if earlier else "")))
    print(printable(f"plots:  {page.parent / 'plots'}"))
    return 0


def _earlier_report(args: argparse.Namespace) -> bool:
    """Whether the output folder already holds a report.html (the run folder, or --out)."""
    run = Path(args.run)
    folder = Path(args.out) if args.out else (run if run.is_dir() else run.parent)
    return (folder / "report.html").is_file()
