"""``grpo-monitor questions RUN --saturated|--unsolved|--learnable``: the question ids of a class, for a dataset
filter (the ``questions.json`` the JSONL sink keeps beside a run's log; :mod:`grpo_monitor.health.export`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from . import fail, printable


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``questions`` on the ``grpo-monitor`` subparsers."""
    parser = subparsers.add_parser(
        "questions", help="list a run's saturated, unsolved or learnable question ids, for a dataset filter",
        description="Read the questions.json beside a run's JSONL log (written by the JSONL sink: every question's "
        "class across its sightings) and print the ids of one class, one per line (--json: one JSON list), or "
        "write them to --out. Saturated: every group of the question had all rows at the batch's top reward; "
        "unsolved: all at the bottom; learnable: any other. Drop the saturated ones from the dataset to raise the "
        "effective prompts per step, e.g. dataset.filter(lambda r: r['prompt'] not in ids) for TRL (whose "
        "question ids are the prompts).")
    parser.add_argument("run", metavar="RUN", help="the run's JSONL log, or the folder holding it")
    which = parser.add_mutually_exclusive_group(required=True)
    for name in ("saturated", "unsolved", "learnable"):
        which.add_argument(f"--{name}", dest="which", action="store_const", const=name,
                           help=f"the {name} questions")
    parser.add_argument("--json", action="store_true", help="print one JSON list instead of one id per line")
    parser.add_argument("--out", default=None, metavar="FILE", help="write the ids to FILE as a JSON list")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Print or write the ids; exit 2 when the run has no questions snapshot."""
    from ...health.export import questions

    try:
        ids = questions(args.run, args.which)
    except (OSError, ValueError) as exc:
        return fail("questions", exc)
    if args.out is not None:
        from ...files.writing import write_output

        try:
            path = write_output(args.out, json.dumps(ids, ensure_ascii=False) + "\n")
        except OSError as exc:
            return fail("questions", exc)
        print(printable(f"questions: {len(ids)} {args.which} question ids written to {path}"))
    elif args.json:
        print(json.dumps(ids, ensure_ascii=False))
    else:
        for qid in ids:
            print(printable(qid if isinstance(qid, str) else json.dumps(qid)))
    return 0
