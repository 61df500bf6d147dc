"""``grpo-monitor wandb-workspace``: save (or print) a W&B workspace of the monitor's panels."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from . import fail


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``wandb-workspace`` on the ``grpo-monitor`` subparsers."""
    parser = subparsers.add_parser(
        "wandb-workspace",
        help="create a W&B workspace with the grpo-monitor panels",
        description=(
            "Build a saved W&B workspace with one section per section of the metric catalogue "
            "(Groups, Advantages, KL, Sampling, Invariants, Tokens, Monitor, Integrations): a line "
            "plot on the grpo/step axis for every catalogued scalar (docs/metrics.md) and the "
            "per-question table. Saving needs network access and a W&B API key; --dry-run prints "
            "the layout as JSON instead."
        ),
    )
    parser.add_argument("--entity", required=True, help="W&B entity (user or team)")
    parser.add_argument("--project", required=True, help="W&B project")
    parser.add_argument("--name", default="grpo-monitor", help="workspace name (default: %(default)s)")
    parser.add_argument(
        "--dry-run",
        "--print",
        dest="dry_run",
        action="store_true",
        help="print the layout as JSON and save nothing",
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Build the workspace; print it (``--dry-run``) or save it. Exit code 2: no wandb-workspaces, 1: save failed."""
    from ...sinks.wandb_workspace import build_workspace, describe_workspace

    try:
        workspace = build_workspace(args.entity, args.project, args.name)
    except (ModuleNotFoundError, ValueError) as exc:
        return fail("wandb-workspace", exc)
    if args.dry_run:
        print(json.dumps(describe_workspace(workspace), indent=2))
        return 0
    try:
        workspace.save()
    except Exception as exc:  # noqa: BLE001 - network, auth: report, don't trace back
        print(
            f"grpo-monitor wandb-workspace: could not save workspace {args.name!r} to "
            f"{args.entity}/{args.project}: {exc!r}. Saving needs network access and a W&B API "
            "key (`wandb login`); use --dry-run to print the layout instead.",
            file=sys.stderr,
        )
        return 1
    print(f"saved workspace {args.name!r}: {workspace.url}")
    return 0
