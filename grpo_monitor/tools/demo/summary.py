"""The demo's closing text: what moved between the start and the end, and theory against observation."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..reporting.facts import ends, plural, span_labels_of, spans
from .bugs import BUGS
from .run import LOG_NAME, DemoResult


def degenerate_check(counts: Sequence[float], ps: Sequence[Sequence[float]], G: int) -> tuple[float, float, float]:
    """(observed, expected, z) for the degenerate groups of a run.

    ``counts[t]`` degenerate groups were observed at step ``t`` among groups whose success
    probabilities were ``ps[t]``. Each group is degenerate with probability
    ``d = p^G + (1-p)^G`` given the policy, so the total is a sum of conditionally
    independent Bernoullis: ``z = (observed - sum d) / sqrt(sum d (1-d))``.

    >>> degenerate_check([1.0], [[0.5, 0.5]], 2)
    (1.0, 1.0, 0.0)
    """
    d = [p**G + (1 - p) ** G for step in ps for p in step]
    observed, expected = float(sum(counts)), float(sum(d))
    var = sum(x * (1 - x) for x in d)
    return observed, expected, (observed - expected) / math.sqrt(var) if var > 0 else math.nan


def observed_counts(result: DemoResult, generated: bool) -> list[float]:
    """Degenerate groups per step (training batch, or every generated group)."""
    rate, total = (
        ("grpo/sampling/generated_degenerate_rate", "grpo/sampling/generated_groups") if generated
        else ("grpo/groups/degenerate_rate", "grpo/groups/total")
    )
    out = []
    for r in result.reports:
        n = r.metrics.get(total, 0.0)
        out.append(round(r.metrics[rate] * n) if n else 0.0)
    return out


def _ends(values: Sequence[float]) -> tuple[float, float]:
    """Start and end of a series, compared as the report compares them (:func:`.reporting.facts.ends`)."""
    return ends(np.asarray(values, dtype=float), spans(max(1, len(values))))


def _metric(result: DemoResult, key: str) -> list[float]:
    return [r.metrics.get(key, math.nan) for r in result.reports]


def _theory(result: DemoResult, key: str) -> list[float]:
    return [row.get(key, math.nan) for row in result.theory]


def _row(label: str, values: Sequence[float], fmt: str, note: str = "", width: int = 10) -> str:
    """A table line: the start and end columns (the one value of a 1-step run), ``width`` wide each."""
    first, last = _ends(values)
    shown = (last,) if len(values) == 1 else (first, last)
    cells = [("n/a" if not math.isfinite(v) else fmt.format(v)).rjust(width) for v in shown]
    return f"  {label:<44}{''.join(cells)}  {note}".rstrip()


def _header(result: DemoResult) -> tuple[str, int]:
    """The column headers worded as the report, ``scan`` and ``compare`` word them, and the column width."""
    labels = span_labels_of([r.step for r in result.reports], dash="-") if result.reports else ["n/a"]
    width = max(10, *(len(label) + 2 for label in labels))
    return f"  {'':<44}" + "".join(label.rjust(width) for label in labels), width


def summary_text(result: DemoResult) -> str:
    """The short summary printed at the end of a clean run."""
    c, G = result.config, result.config.group_size
    ds = c.dynamic_sampling
    rows: list[tuple[str, Sequence[float], str, str]] = [
        ("mean success probability sigmoid(z_q)", _theory(result, "mean_success_prob"), "{:.3f}", ""),
    ]
    if ds:
        rows += [
            ("degenerate rate, generated groups", _metric(result, "grpo/sampling/generated_degenerate_rate"),
             "{:.1%}", ""),
            ("  exact p^G + (1-p)^G (demo policy)", _theory(result, "expected_generated_degenerate_rate"),
             "{:.1%}", ""),
            ("  iid prediction (monitor)", _metric(result, "grpo/sampling/degenerate_rate_iid"), "{:.1%}", ""),
            ("responses per retained group", _metric(result, "grpo/sampling/responses_per_retained_group"),
             "{:.1f}", ""),
            ("  theory G / mean alpha(p_q)", _theory(result, "responses_per_retained_group"), "{:.1f}", ""),
            ("retained groups per step", _metric(result, "grpo/sampling/retained_groups"), "{:.1f}",
             f"of {c.groups_per_step}"),
        ]
    else:
        rows += [
            ("degenerate rate, training batch", _metric(result, "grpo/groups/degenerate_rate"), "{:.1%}", ""),
            ("  exact p^G + (1-p)^G (demo policy)", _theory(result, "expected_degenerate_rate"), "{:.1%}", ""),
            ("  iid prediction (monitor)", _metric(result, "grpo/groups/degenerate_rate_iid"), "{:.1%}", ""),
            ("effective prompts per step", _metric(result, "grpo/groups/effective_prompts"), "{:.1f}",
             f"of {c.groups_per_step}"),
        ]
    rows += [
        ("KL to the reference per token, k3", _metric(result, "grpo/kl/k3_mean"), "{:.4f}", ""),
        ("  exact KL(policy || reference)", _theory(result, "kl_per_token"), "{:.4f}", ""),
    ]
    if ds:
        rows.append(("  exact E[k3] on the retained responses", _theory(result, "k3_per_token"), "{:.4f}",
                     "(filtering over-samples rare answers)"))
    mode = "dynamic sampling" if ds else "no dynamic sampling"
    header, width = _header(result)
    lines = [
        f"grpo-monitor demo: {plural(len(result.reports), 'step')} in {result.seconds:.1f} s; "
        f"K={c.num_questions} questions, {c.groups_per_step} groups of G={G} per step, {mode}",
        header,
    ]
    lines += [_row(*row, width=width) for row in rows if any(math.isfinite(v) for v in row[1])]
    lines += _verdict(result)
    lines += dropped_lines(result)
    lines.append("Outputs:")
    lines += [f"  {name:<12}{path}" for name, path in listed_outputs(result).items()]
    return "\n".join(lines)


def dropped_lines(result: DemoResult) -> list[str]:
    """A warning when a background sink dropped reports (its copy of the run lacks steps), else nothing."""
    from ...catalog.metrics import DROPPED_REPORTS_KEY

    dropped = max((r.metrics.get(DROPPED_REPORTS_KEY, 0.0) for r in result.reports), default=0.0)
    if not dropped:
        return []
    return [f"Warning: a blocked background sink (W&B, TensorBoard) dropped {dropped:.0f} step reports; those "
            f"steps are missing there. {LOG_NAME} and the report hold every step."]


def listed_outputs(result: DemoResult) -> dict[str, str]:
    """The run's outputs by name, with the report's ``plots/`` folder (its PNG figures) after the report."""
    outputs = dict(result.outputs)
    if "report" in outputs:
        outputs["plots"] = str(Path(outputs["report"]).parent / "plots")
    return outputs


def _verdict(result: DemoResult) -> list[str]:
    G, ds = result.config.group_size, result.config.dynamic_sampling
    key = "generated_p" if ds else "trained_p"
    observed, expected, z = degenerate_check(observed_counts(result, ds), [r[key] for r in result.theory], G)
    conventions = {r.estimator for r in result.reports if r.estimator}
    stab = [r.metrics.get("grpo/adv/stabilizer") for r in result.reports if "grpo/adv/stabilizer" in r.metrics]
    n_viol = sum(len(r.violations) for r in result.reports)
    rate = _metric(result, "grpo/sampling/generated_degenerate_rate" if ds else "grpo/groups/degenerate_rate")
    first, last = _ends(rate)
    trend = (f" It rose from {first:.0%} to {last:.0%} as questions saturated, as finite-group theory predicts."
             if last > first else "")
    return [
        f"Degenerate groups over the run: {observed:.0f} observed, {expected:.1f} expected from p^G + (1-p)^G "
        f"(z = {z + 0.0:+.2f}).{trend}".replace("z = -0.00", "z = +0.00"),
        f"Estimator: {', '.join(sorted(conventions)) or 'n/a'}"
        + (f" (stabilizer {stab[-1]:.2g})" if stab else "") + f"; violations: {n_viol or 'none'}.",
    ]


def failure_text(result: DemoResult) -> str:
    """What a run stopped by a breach prints: the bug, the monitor's message, the repro path."""
    exc = result.failure
    bug = BUGS.get(result.bug) if result.bug else None
    step = exc.violations[0].step if exc and exc.violations else "?"
    head = f"grpo-monitor demo: the run stopped at step {step}"
    head += f" with the injected bug '{bug.name}' ({bug.summary})." if bug else "."
    lines = [head, "", "InvariantViolation:"]
    lines += [f"  {line}" for line in str(exc).splitlines()]
    paths = sorted({v.repro_path for v in (exc.violations if exc else []) if v.repro_path})
    for path in paths:
        lines += ["", f"Repro file: {path}",
                  f"  replay it: python -c \"import grpo_monitor; print(grpo_monitor.replay({path!r}).violations)\""]
    lines += ["", *dropped_lines(result)] if dropped_lines(result) else []
    if "report" in result.outputs:
        lines += ["", f"Report: {result.outputs['report']}", f"Plots:  {listed_outputs(result)['plots']}"]
    return "\n".join(lines)
