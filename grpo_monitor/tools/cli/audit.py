"""``grpo-monitor audit MODULE:FUNCTION``: probe an advantage function and report what it really computes.

Exit code 0 when nothing breaks (it matches a registry entry, or is at least consistent),
1 when an invariant breaks with error severity or ``--expect`` does not fit, 2 when the
function cannot be loaded or does not run (raises on every probe, returns None, a
non-tensor or the wrong shape).
"""

from __future__ import annotations

import argparse
import json
import math
from typing import TYPE_CHECKING, Any

from . import fail

if TYPE_CHECKING:
    from ..audit.run import AuditResult

_NAN_TEXT = {
    "excluded": "excluded: unscorable rows get 0 and stay out of the statistics",
    "counted": "COUNTED: unscorable rows enter the statistics or get a nonzero advantage",
    "group_dropped": "the whole group gets 0 when one reward is NaN",
    "propagates": "propagate: NaN in, NaN out",
    "raises": "the function raises on NaN rewards",
}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``audit`` on the ``grpo-monitor`` subparsers."""
    parser = subparsers.add_parser(
        "audit",
        help="probe your advantage function (rewards (B, G) in, advantages (B, G) out) with crafted batches",
        description="Import MODULE:FUNCTION (MODULE: a dotted module importable from the current folder, or a "
        "path to a .py "
        "file) and probe it, in float64 and in float32 as trainers compute: binary groups at every success count,"
        " continuous rewards, constant groups, NaN rows, rewards shifted by an offset (as large as float32 still "
        "resolves them), large and small scales. Reports the registry estimator it reproduces (with the fitted "
        "stabilizer), every invariant it breaks with an example and the likely cause, permutation equivariance, "
        "and its expected gradient relative to the true gradient p(1-p) (exact enumeration). Exit code 0: sound, "
        "1: broken, 2: the function does not run.",
    )
    parser.add_argument("function", metavar="MODULE:FUNCTION", help="e.g. mypkg.adv:grpo_advantages or ./adv.py:fn")
    parser.add_argument("--group-size", "-G", type=int, default=8, help="responses per group G (default 8)")
    parser.add_argument("--expect", default="auto", metavar="NAME",  # checked in run(): the registry needs numpy
                        help="the estimator the function should reproduce: a name of grpo_monitor.ESTIMATORS "
                        "(population, bessel, none, leave_one_out, batch, trl.group, verl.grpo, ...), shown beside "
                        "the inferred one, or MODULE:FUNCTION, your own reference; exit 1 when it does not fit "
                        "(default: auto, "
                        "only report the match)")
    parser.add_argument("--lengths", default=None, metavar="MODULE:FUNCTION",
                        help="token counts rewards (B, G) -> lengths (B, G): the function is called with "
                        "lengths=... and the monitor gets the same counts (token-whitening estimators)")
    parser.add_argument("--reward-components", type=int, default=None, metavar="K",
                        help="call the function as fn(rewards, reward_components=C) with K reward columns per "
                        "response, C (B, G, K), that sum to the probe's rewards, and hand the monitor the same "
                        "columns (multi-reward estimators: trl.normalize_then_sum, verl.gdpo)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Audit the function; print text or JSON; exit 2 when it does not run, 1 when it is broken, else 0."""
    from ..audit.loading import load_function
    from ..audit.run import audit

    try:
        fn = load_function(args.function)
        expect = args.expect
        if ":" in expect:  # your own reference, declared under its spec
            from ...estimators.custom import custom

            expect = custom(load_function(expect), name=expect).name
        lengths = load_function(args.lengths) if args.lengths else None
        result = audit(fn, args.group_size, expect=expect, name=args.function, lengths=lengths,
                       reward_components=args.reward_components)
    except (ValueError, TypeError, ImportError, SyntaxError) as exc:
        return fail("audit", exc)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, allow_nan=False))
    else:
        print(format_text(result))
    return result.exit_code


def _verdict_lines(r: AuditResult) -> list[str]:
    """The verdict first: what the function matches, or why it is broken or does not run."""
    from ..reporting.facts import plural

    if r.verdict == "error":
        return [f"  verdict               ERROR: {r.error}"]
    if r.verdict == "broken":
        n = len({v["invariant"] for v in r.violations if v["severity"] == "error"})
        lines = [f"  verdict               BROKEN: {plural(n, 'invariant')} broken"
                 + (f": {r.causes[0]}" if r.causes else "")]
        lines += [f"                        also: {c}" for c in r.causes[1:]]
        lines += [f"  matches               {r.match['text']}"] if r.match else []
    elif r.match:
        lines = [f"  verdict               OK: matches {r.match['text']}"]
    else:
        lines = ["  verdict               CONSISTENT: no invariant breaks, but no registry estimator reproduces it"]
    if len(r.matches) > 1:
        lines.append(f"  also matches          {', '.join(r.matches[1:])}")
    if r.expected:
        fits = "reproduces it" if r.expected_fits else "does NOT reproduce it"
        lines.append(f"  expected              {r.expected}, inferred {r.inferred or 'no registry entry'}: "
                     f"{r.expected} {fits}")
    return lines


def _convention_text(r: AuditResult) -> str:
    if r.stabilizer is not None:
        return f"{r.convention} (stabilizer {r.stabilizer:.3g})"
    return r.convention


def format_text(r: AuditResult) -> str:
    """The human-readable audit: verdict lines, violations with examples, gradient table."""
    yes_no = {True: "yes", False: "NO", None: "n/a"}
    scale = ", ".join(f"rewards {k}: |advantages| x{v:.3g}" for k, v in r.scale.items() if math.isfinite(v))
    head = f"grpo-monitor audit: {r.function}  (G={r.group_size}, probed in {' and '.join(r.dtypes)})"
    if r.verdict == "error":
        return "\n".join([head, *_verdict_lines(r)])
    lines = [
        head,
        *_verdict_lines(r),
        f"  convention            {_convention_text(r)}",
        f"  permutation-equivariant within groups: {yes_no[r.equivariant]}",
        f"  independent of the other groups in the batch: {yes_no[r.batch_independent]}",
        f"  NaN rewards           {_NAN_TEXT.get(r.nan_rows, r.nan_rows)}",
        f"  reward scale          {scale or 'n/a'}",
    ]
    lines += _violation_lines(r)
    lines += [f"  note: {n}" for n in r.notes]
    lines += _gradient_lines(r)
    return "\n".join(lines)


def _violation_lines(r: AuditResult) -> list[str]:
    from ..reporting.facts import plural

    if not r.violations:
        return ["  violations            none"]
    by_invariant: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for v in sorted(r.violations, key=lambda v: v["severity"] != "error"):
        by_invariant.setdefault((v["invariant"], v["severity"]), []).append(v)
    errors = len({name for name, severity in by_invariant if severity == "error"})
    warnings = len({name for name, severity in by_invariant if severity == "warning"})
    lines = [f"  violations            {plural(errors, 'invariant')} broken, {plural(warnings, 'warning')}"]
    for (name, severity), found in by_invariant.items():
        first = found[0]
        probes = ", ".join(dict.fromkeys(_probe_label(v) for v in found))
        lines.append(f"  - {name}{' (warning)' if severity == 'warning' else ''} (probes: {probes})")
        lines.append(f"      observed {first['observed']}; expected {first['expected']}")
        if first.get("example"):
            ex = first["example"]
            lines.append(f"      e.g. rewards {_seq(ex['rewards'])} -> advantages {_seq(ex['advantages'])}")
        if first.get("hint"):
            lines.append(f"      likely cause: {first['hint']}")
    return lines


def _probe_label(v: dict[str, Any]) -> str:
    return f"{v['probe']}@{v['dtype']}" if v.get("dtype") == "float32" else v["probe"]


def _seq(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.4g}" for v in values) + "]"


def _gradient_lines(r: AuditResult) -> list[str]:
    if not r.gradient:
        return []
    head = f"Expected gradient vs the true gradient p(1-p), G={r.group_size}, exact enumeration over success counts:"
    defined = [row for row in r.gradient if row["function"] is not None]
    if not defined:
        return [head, f"  undefined: {r.gradient[0].get('error', 'no finite advantages')}"]
    lines = [head, f"  {'p':>6}  {'true':>10}  {'function':>10}  {'ratio':>7}"]
    for row in r.gradient:
        if row["function"] is None:
            lines.append(f"  {row['p']:>6.3g}  {row['true']:>10.6f}  {'n/a':>10}  {'n/a':>7}  {row.get('error', '')}")
        else:
            lines.append(f"  {row['p']:>6.3g}  {row['true']:>10.6f}  {row['function']:>10.6f}  {row['ratio']:>7.4f}")
    if r.batch_independent is False:
        lines.append("  (the function depends on the other groups in the batch: each group is evaluated alone here)")
    lines.append("  (population std: 2.61, 2.33, 1.86 at p = 0.01, 0.1, 0.5; mean-centred only: 7/8; leave-one-out: 1)")
    return lines
