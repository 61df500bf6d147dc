"""``grpo-monitor compare RUN_A RUN_B``: two runs on one page, on the same axes."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Any

from . import add_read_limits, fail, missing_extra, printable, read_limits


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``compare`` on the ``grpo-monitor`` subparsers."""
    parser = subparsers.add_parser(
        "compare",
        help="one page with two runs' degenerate rate, effective prompts, iid prediction, KL and violations",
        description="Read two runs' monitor.jsonl (a scan's output folder, a live run's folder, or the JSONL file "
        "itself) and write compare.html (self-contained) and compare.png: degenerate rate against its iid "
        "prediction, effective prompts, mean reward, KL and violations, both runs on the same axes, and a table "
        "of each run's start and end values (first and last step below 10 steps, first and last tenth from 10 "
        "on, worded as the report words them).",
    )
    parser.add_argument("run_a", metavar="RUN_A", help="first run: folder holding monitor.jsonl, or the file")
    parser.add_argument("run_b", metavar="RUN_B", help="second run")
    parser.add_argument("--labels", default=None, metavar="A,B", help="names of the runs (default: folder names)")
    parser.add_argument("--out", default="compare", help="output folder (default: ./compare)")
    add_read_limits(parser)
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Write the page (an earlier one in --out is replaced, and said so); print the table; exit 2 when a log is
    missing or unreadable, 3 without matplotlib."""
    if importlib.util.find_spec("matplotlib") is None:
        return missing_extra("compare", "the comparison (its figures)", "matplotlib", "plots")
    from ..scan.compare import compare_text, load_pair, write_comparison

    labels = [s.strip() for s in args.labels.split(",")] if args.labels else None
    if labels is not None and len(labels) != 2:
        return fail("compare", f"--labels takes two names separated by a comma, but got {args.labels!r}")
    try:
        with read_limits(args):
            runs, names = load_pair(args.run_a, args.run_b, labels)
        earlier = (Path(args.out) / "compare.html").is_file()
        page = write_comparison(runs, names, Path(args.out))
    except (OSError, ValueError) as exc:  # LogFormatError and InputFileError are ValueErrors
        return fail("compare", exc)
    print(printable(compare_text(runs, names)))
    print(printable(f"compare: {page}" + (" (replaced the earlier compare.html)" if earlier else "")))
    return 0

