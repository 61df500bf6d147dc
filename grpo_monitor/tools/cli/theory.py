"""``grpo-monitor theory``: the finite-group gradient table and sampling ledger for given ``p`` and ``G``."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from typing import Any

from . import LazyChoices, fail

_GRADIENT_COLUMNS = (
    ("p", "p", "{:.4g}"),
    ("true", "true", "{:.7f}"),
    ("centered", "centered", "{:.7f}"),
    ("leave_one_out", "leave-one-out", "{:.7f}"),
    ("standardized", "standardized", "{:.7f}"),
    ("centered_ratio", "centered/true", "{:.4f}"),
    ("standardized_ratio", "standardized/true", "{:.4f}"),
)
_LEDGER_COLUMNS = (
    ("p", "p", "{:.4g}"),
    ("retention", "retention alpha", "{:.7f}"),
    ("degenerate", "degenerate", "{:.7f}"),
    ("groups_per_retained", "groups/retained", "{:.4f}"),
    ("responses_per_retained", "responses/retained", "{:.4f}"),
    ("non_degenerate_per_budget", "non-degenerate/{budget}", "{:.1f}"),
)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``theory`` on the ``grpo-monitor`` subparsers."""
    parser = subparsers.add_parser(
        "theory",
        help="exact expected gradients and sampling ledger of the one-token Bernoulli model",
        description="Exact finite-group expectations: expected gradient of the true, centered, "
        "leave-one-out and standardized estimators, and the dynamic-sampling ledger.",
    )
    parser.add_argument("--group-size", "-G", type=int, default=8, help="responses per group G (default 8)")
    parser.add_argument("--p", default="0.01,0.1,0.5", help="comma-separated success probabilities (0.1 or 1/10)")
    parser.add_argument("--std", choices=LazyChoices(_std_conventions), default="population", metavar="STD",
                        help="estimator of the group std: %(choices)s (default %(default)s)")
    parser.add_argument("--eps", type=float, default=0.0, help="stabilizer added to the std (default 0)")
    parser.add_argument("--budget", type=int, default=1000,
                        help="responses you can afford to generate; the non-degenerate/BUDGET column gives the "
                        "expected groups with reward variation that many responses buy, (BUDGET // G) x (1 - p^G - "
                        "(1-p)^G) (default 1000)")
    parser.add_argument("--json", action="store_true", help="print JSON (null for infinite or undefined values)")
    parser.set_defaults(func=run)
    return parser


def _std_conventions() -> tuple[str, ...]:
    from ..theory import STD_CONVENTIONS

    return STD_CONVENTIONS


def run(args: argparse.Namespace) -> int:
    """Print both tables; exit code 2 on invalid arguments."""
    from ...strict_json import json_safe
    from .. import theory

    ps = [item.strip() for item in args.p.split(",") if item.strip()]
    try:
        tables = theory.theory_tables(args.group_size, ps, std=args.std, eps=args.eps, budget=args.budget)
    except (TypeError, ValueError) as exc:
        return fail("theory", exc)
    if args.json:
        settings = {"group_size": args.group_size, "std": args.std, "eps": args.eps, "budget": args.budget}
        print(json.dumps(json_safe({**settings, **tables}), indent=2, allow_nan=False))
        return 0
    title = f"G={args.group_size}, std={args.std}, eps={args.eps:g}"
    print(f"Expected gradient E[(1/G) sum_i A_i (a_i - p)]  ({title})")
    print(format_table(tables["gradient"], _GRADIENT_COLUMNS))
    print()
    print(f"Dynamic-sampling ledger  (G={args.group_size}; inf: never retained)")
    ledger_columns = [(key, header.format(budget=args.budget), fmt) for key, header, fmt in _LEDGER_COLUMNS]
    print(format_table(tables["ledger"], ledger_columns))
    return 0


def format_table(rows: Sequence[dict[str, float]], columns: Sequence[tuple[str, str, str]]) -> str:
    """Right-aligned plain-text table of ``rows`` with ``(key, header, format)`` columns.

    >>> print(format_table([{"p": 0.5}], [("p", "p", "{:.2f}")]))
       p
    ----
    0.50
    """
    cells = [[_cell(row[key], fmt) for key, _, fmt in columns] for row in rows]
    headers = [header for _, header, _ in columns]
    widths = [max(len(text) for text in column) for column in zip(headers, *cells, strict=True)]
    lines = ["  ".join(text.rjust(w) for text, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(text.rjust(w) for text, w in zip(line, widths, strict=True)) for line in cells]
    return "\n".join(lines)


def _cell(value: float, fmt: str) -> str:
    if math.isnan(value):
        return "n/a"
    return fmt.format(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
