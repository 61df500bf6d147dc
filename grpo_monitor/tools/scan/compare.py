"""Two runs on one page: degenerate rate and its iid prediction, effective prompts, reward, KL, violations.

Each run is a folder holding a ``monitor.jsonl`` (a scan's output or a live run's log), or
the log itself. Every panel puts both runs on the same axes (run A blue, run B orange; thin:
per step, thick: rolling mean over a fiftieth of the steps), which is what users do by hand
in W&B. ``compare.html`` is self-contained (the figure inlined), ``compare.png`` beside it.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..reporting.facts import plural
from ..reporting.numbers import number

#: (title, y label, [(metric key, line label, dashes)]) of the panels, top to bottom.
PANELS: tuple[tuple[str, str, tuple[tuple[str, str, str], ...]], ...] = (
    ("Degenerate groups (no reward variation)", "share of groups",
     (("grpo/groups/degenerate_rate", "observed", "-"), ("grpo/groups/degenerate_rate_iid", "iid prediction", "--"))),
    ("Effective prompts (groups with reward variation)", "groups", (("grpo/groups/effective_prompts", "", "-"),)),
    ("Mean reward", "reward", (("grpo/reward/mean", "", "-"),)),
    ("KL to the reference (k3, per token)", "nats", (("grpo/kl/k3_mean", "", "-"),)),
    ("Invariant violations", "violations / step", (("grpo/invariants/violations", "", "-"),)),
)
#: (label, key, format) of the table.
TABLE = (
    ("degenerate rate", "grpo/groups/degenerate_rate", "{:.1%}"),
    ("degenerate rate, iid prediction", "grpo/groups/degenerate_rate_iid", "{:.1%}"),
    ("effective prompts", "grpo/groups/effective_prompts", "{:.1f}"),
    ("mean reward", "grpo/reward/mean", "{:.4g}"),
    ("overdispersion", "grpo/groups/overdispersion", "{:.3f}"),
    ("KL k3 per token", "grpo/kl/k3_mean", "{:.4g}"),
)
COLORS = ("#1f77b4", "#ff7f0e")


def tenths(values: np.ndarray | None) -> tuple[float, float]:
    """The start and the end of a run as the report compares them (:func:`grpo_monitor.tools.reporting.facts.spans`):
    the mean over the first and the last tenth from 10 steps on, else the first and the last step.

    >>> tenths(np.arange(20.0)), tenths(np.arange(3.0))
    ((0.5, 18.5), (0.0, 2.0))
    """
    from ..reporting.facts import ends, spans

    if values is None or len(values) == 0:
        return math.nan, math.nan
    return ends(values, spans(len(values)))


def span_headers(run: Any, label: str) -> list[str]:
    """``<label> first step (1)``, ``<label> last tenth (steps 90-99)``: the run's two columns, worded as in
    the report."""
    from ..reporting.facts import span_labels_of

    return [f"{label} {w}" for w in span_labels_of([int(s) for s in run.steps], dash="-")]


def rolling(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over ``window`` steps, ignoring NaN (NaN where the window holds none)."""
    ok = np.isfinite(values)
    sums = np.cumsum(np.where(ok, values, 0.0))
    counts = np.cumsum(ok)
    lag = lambda a: np.concatenate([np.zeros(window), a[:-window]]) if window < len(a) else np.zeros_like(a)  # noqa: E731
    n = counts - lag(counts)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, (sums - lag(sums)) / np.maximum(n, 1), np.nan)


def draw(runs: Sequence[Any], labels: Sequence[str]):
    """The comparison figure (one panel per metric any run logged), or None when none did."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    panels = [p for p in PANELS if any(r.has(k) for r in runs for k, _, _ in p[2])]
    if not panels:
        return None
    fig = Figure(figsize=(10, 2.6 * len(panels)), layout="constrained")
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (title, ylabel, series) in zip(axes, panels, strict=True):
        for run, label, color in zip(runs, labels, COLORS, strict=False):
            _plot_run(ax, run, label, color, series, violations=series[0][0] == "grpo/invariants/violations")
        ax.set_title(title, loc="left", fontsize=10)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    axes[-1].set_xlabel("step")
    return fig


def _plot_run(ax: Any, run: Any, label: str, color: str, series: Sequence[tuple[str, str, str]],
              violations: bool) -> None:
    window = max(1, len(run.steps) // 50)
    for key, what, dashes in series:
        values = run.series(key)
        if values is None or not np.isfinite(values).any():
            continue
        name = f"{label} {what}".strip()
        if violations:
            hit = values > 0
            ax.scatter(run.steps[hit], values[hit], color=color, marker="x", s=18,
                       label=f"{name} ({int(hit.sum())} step{'s' if hit.sum() != 1 else ''})")
            top = float(np.nanmax(values)) if np.isfinite(values).any() else 0.0
            ax.set_ylim(0, max(ax.get_ylim()[1], 1.25 * max(top, 1.0)))
            continue
        if dashes == "-" and window > 1:
            ax.plot(run.steps, values, color=color, alpha=0.25, linewidth=0.8)
        ax.plot(run.steps, rolling(values, window), color=color, linestyle=dashes, linewidth=1.6, label=name)


def table_rows(runs: Sequence[Any]) -> list[tuple[str, list[str]]]:
    """(label, [A first, A last, B first, B last]) per metric either run logged (one cell for a 1-step run)."""
    rows = []
    for label, key, fmt in TABLE:
        if not any(r.has(key) for r in runs):
            continue
        cells = [number(v, fmt, key) for r in runs for v in tenths(r.series(key))[:len(span_headers(r, ""))]]
        rows.append((label, cells))
    return rows


def violation_rows(run: Any) -> list[tuple[str, int, int]]:
    """(invariant, first step, steps broken) of one run."""
    found: dict[str, list[int]] = {}
    for mark in run.violations:
        found.setdefault(mark.invariant, []).append(int(mark.step))
    return [(name, min(steps), len(set(steps))) for name, steps in found.items()]


def compare_text(runs: Sequence[Any], labels: Sequence[str]) -> str:
    """The comparison as a terminal table: every column as wide as its header or its widest cell, two spaces
    apart, right-aligned under its header."""
    headers = [h for run, lab in zip(runs, labels, strict=True) for h in span_headers(run, lab)]
    rows = table_rows(runs)
    first = max([len(label) for label, _ in rows] + [0])
    widths = [max([len(h)] + [len(cells[i]) for _, cells in rows]) for i, h in enumerate(headers)]
    lines = [" " * first + "".join(f"  {h:>{w}}" for h, w in zip(headers, widths, strict=True))]
    lines += [f"{label:{first}}" + "".join(f"  {c:>{w}}" for c, w in zip(cells, widths, strict=True))
              for label, cells in rows]
    for run, label in zip(runs, labels, strict=True):
        found = violation_rows(run)
        text = "; ".join(f"{n} from step {s} ({plural(k, 'step')})" for n, s, k in found) or "none"
        lines.append(f"violations {label}: {text}")
    return "\n".join(lines)


def load_pair(run_a: str | Path, run_b: str | Path, labels: Sequence[str] | None = None) -> tuple[list[Any], list[str]]:
    """Both runs' logs (``reporting.load_run``) and their labels (default: the folder names)."""
    from ..reporting import load_run

    runs = [load_run(run_a), load_run(run_b)]
    labels = list(labels) if labels else [_name(run_a, "A"), _name(run_b, "B")]
    if len(labels) != 2 or labels[0] == labels[1]:
        labels = [f"A {labels[0]}", f"B {labels[-1]}"] if len(labels) == 2 else labels
    if len(labels) != 2:
        raise ValueError(f"labels must be two names, but got {labels!r}")
    return runs, labels


def write_comparison(runs: Sequence[Any], labels: Sequence[str], out: str | Path) -> Path:
    """Write ``compare.html`` and ``compare.png`` into ``out``; the page's path (never through a symlink)."""
    from ...files.writing import OutputDir

    fig = draw(runs, labels)
    png = b""
    if fig is not None:
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=100)
        png = buffer.getvalue()
    with OutputDir(out) as folder:  # never through a symlink planted at compare.png or compare.html
        if png:
            folder.write("compare.png", png)
        else:
            folder.remove("compare.png")
        return folder.write("compare.html", render(runs, labels, png))


def compare_runs(run_a: str | Path, run_b: str | Path, out: str | Path,
                 labels: Sequence[str] | None = None) -> Path:
    """Write ``compare.html`` and ``compare.png`` for two runs into ``out``; the page's path."""
    runs, labels = load_pair(run_a, run_b, labels)
    return write_comparison(runs, labels, out)


def _name(path: str | Path, fallback: str) -> str:
    p = Path(path)
    name = p.parent.name if p.is_file() else p.name
    return name or fallback


_CSS = ("body{font-family:system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1b1f24}"
        "main{max-width:1000px;margin:0 auto;padding:24px}table{border-collapse:collapse;background:#fff;"
        "font-size:.9em;margin:8px 0}th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left}"
        "td.num{text-align:right;font-variant-numeric:tabular-nums}img{width:100%;background:#fff;"
        "border:1px solid #d0d7de}.a{color:#1f77b4}.b{color:#ff7f0e}")


def render(runs: Sequence[Any], labels: Sequence[str], png: bytes) -> str:
    """The self-contained comparison page."""
    esc = html.escape
    head = "".join(f'<th class="{c}">{esc(h)}</th>' for run, lab, c in zip(runs, labels, "ab", strict=False)
                   for h in span_headers(run, lab))
    rows = "".join(f"<tr><th>{esc(label)}</th>" + "".join(f"<td class=num>{esc(c)}</td>" for c in cells) + "</tr>"
                   for label, cells in table_rows(runs))
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>grpo-monitor compare: {esc(labels[0])} vs {esc(labels[1])}</title>",
             f"<style>{_CSS}</style></head><body><main>",
             f'<h1>grpo-monitor compare: <span class="a">{esc(labels[0])}</span> vs '
             f'<span class="b">{esc(labels[1])}</span></h1>']
    for run, label in zip(runs, labels, strict=True):
        parts.append(f"<p>{esc(label)}: {esc(str(run.path))}, {len(run.steps)} steps "
                     f"({int(run.steps[0])}..{int(run.steps[-1])})</p>")
    parts.append(f'<table id="summary"><tr><th></th>{head}</tr>{rows}</table>')
    parts.append("<h2>Violations</h2>")
    for run, label in zip(runs, labels, strict=True):
        found = violation_rows(run)
        items = "".join(f"<tr><td>{esc(n)}</td><td class=num>{s}</td><td class=num>{k}</td></tr>" for n, s, k in found)
        parts.append(f"<p>{esc(label)}: " + ("none</p>" if not found else
                     f"</p><table><tr><th>invariant</th><th>first step</th><th>steps</th></tr>{items}</table>"))
    if png:
        data = base64.b64encode(png).decode("ascii")
        parts.append(f'<h2>Both runs on the same axes</h2><img id="compare" alt="comparison" '
                     f'src="data:image/png;base64,{data}">')
    parts.append("</main></body></html>")
    return "\n".join(parts)
