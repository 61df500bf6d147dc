"""``grpo-monitor demo``: train the finite-group teaching model with GRPO and the monitor attached.

Exit code 0 for a clean run, 1 when an invariant broke (``--inject-bug``), 2 for bad
arguments, 3 when ``--wandb`` is asked for without wandb installed. Before training it says
what will not be written (no report without matplotlib) and what earlier output in ``--out``
is replaced.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

from . import LazyChoices, fail, missing_extra

#: Option dest -> the DemoConfig field it sets; an option left out keeps DemoConfig's default.
_CONFIG_FIELDS = {
    "steps": "steps", "group_size": "group_size", "questions": "num_questions", "groups_per_step": "groups_per_step",
    "max_gen_batches": "max_gen_batches", "lr": "lr", "seed": "seed",
}


class _DemoHelpFormatter(argparse.HelpFormatter):
    """Adds DemoConfig's default to the options that set one of its fields, when the help is printed."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        field = _CONFIG_FIELDS.get(action.dest)
        if field is None:
            return text
        from ..demo import DemoConfig

        return f"{text} (default {getattr(DemoConfig, field)})"


def _bug_names() -> list[str]:
    from ..demo import BUGS

    return sorted(BUGS)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``demo`` on the ``grpo-monitor`` subparsers (imports nothing from the demo: no torch)."""
    parser = subparsers.add_parser(
        "demo", formatter_class=_DemoHelpFormatter,
        help="train a teaching model with GRPO and the monitor attached (seconds, CPU)",
        description="Train the finite-group teaching model (K questions, each answered correctly with probability "
        "sigmoid(z_q), rewards 0/1) with a real GRPO update and the monitor attached. Writes the JSONL log, "
        "TensorBoard events, a W&B offline run (when W&B is installed), an HTML report and its plots/ to --out.",
    )
    parser.add_argument("--out", default=None, help="output folder (default runs/demo, or runs/demo-<bug>)")
    parser.add_argument("--steps", type=int, help="training steps")
    parser.add_argument("--group-size", "-G", type=int, help="responses per question G")
    parser.add_argument("--questions", type=int, help="questions K in the data set")
    parser.add_argument("--groups-per-step", type=int, help="groups per batch B")
    parser.add_argument("--dynamic-sampling", action="store_true",
                        help="DAPO-style: regenerate until every group in the batch has reward variation")
    parser.add_argument("--max-gen-batches", type=int,
                        help="retry cap: generation batches per step with --dynamic-sampling")
    parser.add_argument("--lr", type=float, help="SGD learning rate")
    parser.add_argument("--seed", type=int, help="random seed")
    wandb = parser.add_mutually_exclusive_group()
    wandb.add_argument("--wandb", dest="wandb", action="store_true", default=None,
                       help="log a W&B offline run (default: when wandb is installed)")
    wandb.add_argument("--no-wandb", dest="wandb", action="store_false", help="no W&B run")
    parser.add_argument("--no-tensorboard", action="store_true", help="no TensorBoard events")
    parser.add_argument("--no-report", action="store_true", help="skip the HTML report")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--inject-bug", metavar="NAME", choices=LazyChoices(_bug_names), default=None,
                        help="rerun with a known implementation bug: %(choices)s (see --list-bugs)")
    parser.add_argument("--list-bugs", action="store_true", help="list the injectable bugs and exit")
    parser.set_defaults(func=run)
    return parser


def list_bugs() -> str:
    """One line per bug: name, what it does, the invariants that catch it."""
    from ..demo import BUGS

    width = max(len(name) for name in BUGS)
    lines = ["Injectable bugs (grpo-monitor demo --inject-bug NAME):"]
    for bug in BUGS.values():
        lines.append(f"  {bug.name.ljust(width)}  {bug.summary}  [caught by: {', '.join(bug.invariants)}]")
    return "\n".join(lines)


def _config(args: argparse.Namespace) -> Any:
    """The DemoConfig of the options given (the others keep its defaults)."""
    from ..demo import DemoConfig

    given = {field: getattr(args, dest) for dest, field in _CONFIG_FIELDS.items() if getattr(args, dest) is not None}
    return DemoConfig(dynamic_sampling=args.dynamic_sampling, **given)


def run(args: argparse.Namespace) -> int:
    """Run the demo; print the summary (or the breach) and return the exit code."""
    if args.list_bugs:
        print(list_bugs())
        return 0
    try:
        config = _config(args)
    except ValueError as exc:
        return fail("demo", exc)
    if args.wandb and importlib.util.find_spec("wandb") is None:
        return missing_extra("demo", "--wandb (a W&B offline run of the demo)", "wandb", "wandb")
    from ..demo import run_demo
    from ..demo.summary import failure_text, summary_text

    out = args.out or ("runs/demo" if args.inject_bug is None else f"runs/demo-{args.inject_bug}")
    for note in before_run(Path(out), report=not args.no_report):
        print(f"grpo-monitor demo: {note}", file=sys.stderr)
    result = run_demo(
        config, out, bug=args.inject_bug, wandb=args.wandb, tensorboard=not args.no_tensorboard,
        progress=not args.no_progress, report=not args.no_report,
    )
    if result.failed:
        print(failure_text(result), file=sys.stderr)
        return 1
    print(summary_text(result))
    return 0


#: What a demo run writes into --out and replaces when run again there.
REPLACED = ("monitor.jsonl", "theory.jsonl", "run.json", "report.html", "plots", "tensorboard")


def before_run(out: Path, *, report: bool) -> list[str]:
    """What to say before training: the report that will not be written, the earlier outputs replaced."""
    notes = []
    if report and importlib.util.find_spec("matplotlib") is None:
        notes.append("matplotlib is not installed, so this run writes no HTML report (install it with "
                     "`pip install 'grpo-monitor[plots]'`, then run `grpo-monitor report` on the folder); the log "
                     "and the other outputs are written as usual")
    present = [name for name in REPLACED if (out / name).exists()]
    if present:
        notes.append(f"{out} holds an earlier run's {', '.join(present)}: replaced by this run (pass --out DIR to "
                     "keep them)")
    return notes
