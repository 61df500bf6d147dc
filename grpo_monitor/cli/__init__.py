"""The ``grpo-monitor`` command line: one module per subcommand.

Each subcommand module exposes ``add_parser(subparsers)`` (which registers the
subcommand and sets ``func``) and is listed in ``_SUBCOMMANDS``; ``func(args)`` returns
the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

#: Subcommand modules under ``grpo_monitor.cli``; a missing one is skipped.
_SUBCOMMANDS = ("demo", "report", "audit", "theory", "wandb_workspace")


def build_parser() -> argparse.ArgumentParser:
    """The ``grpo-monitor`` parser with every subcommand module that imports."""
    parser = argparse.ArgumentParser(
        prog="grpo-monitor", description="Monitoring and invariant checks for GRPO training runs."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _SUBCOMMANDS:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{name}":
                continue
            raise
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the subcommand, return its exit code (2: no subcommand)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


def fail(command: str, message: object, code: int = 2) -> int:
    """Print ``grpo-monitor COMMAND: error: MESSAGE`` to stderr and return ``code`` (2: bad input)."""
    print(f"grpo-monitor {command}: error: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
