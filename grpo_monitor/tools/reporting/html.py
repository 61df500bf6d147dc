"""One self-contained HTML page: inline CSS, PNGs inlined as base64, no external asset."""

from __future__ import annotations

import base64
import datetime
import html
from collections.abc import Collection, Sequence

import numpy as np

from .data import RunData
from .facts import Spans, degenerate_check, ends, plural, span_labels_of, spans
from .locations import where_else
from .numbers import constant_by_definition, html_prose, number

#: (label, key, format) of the summary table: the start of the run against its end.
SUMMARY_METRICS: tuple[tuple[str, str, str], ...] = (
    ("degenerate rate (training batch)", "grpo/groups/degenerate_rate", "{:.1%}"),
    ("degenerate rate, iid prediction", "grpo/groups/degenerate_rate_iid", "{:.1%}"),
    ("degenerate rate (generated)", "grpo/sampling/generated_degenerate_rate", "{:.1%}"),
    ("effective prompts", "grpo/groups/effective_prompts", "{:.1f}"),
    ("mean reward", "grpo/reward/mean", "{:.3f}"),
    ("responses per retained group", "grpo/sampling/responses_per_retained_group", "{:.1f}"),
    ("KL k3 per token", "grpo/kl/k3_mean", "{:.3g}"),
    ("importance ratio (mean)", "grpo/ratio/mean", "{:.4f}"),
    ("clip fraction", "grpo/ratio/clip_frac", "{:.1%}"),
    ("response length (tokens)", "grpo/tokens/response_length_mean", "{:.2f}"),
    ("live-token fraction", "grpo/tokens/live_fraction", "{:.1%}"),
    ("advantage std, live groups", "grpo/adv/live_std_mean", "{:.4f}"),
    ("stabilizer epsilon", "grpo/adv/stabilizer", "{:.2g}"),
    ("max |group mean advantage|", "grpo/adv/group_mean_abs_max", "{:.2e}"),
)

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;background:#f6f7f9;color:#1b1f24}
main{max-width:960px;margin:0 auto;padding:24px}
h1{font-size:1.5em;margin:0 0 4px}h2{font-size:1.15em;margin:28px 0 8px}
.meta{color:#57606a;font-size:.9em}
.status{padding:12px 16px;border-radius:6px;margin:16px 0;font-weight:600}
.ok{background:#dafbe1;border:1px solid #4ac26b}.warn{background:#fff8c5;border:1px solid #d4a72c}
.fail{background:#ffebe9;border:1px solid #ff8182}
.check{background:#fff;border-left:4px solid #0969da;padding:8px 12px;margin:12px 0}
table{border-collapse:collapse;width:100%;background:#fff;font-size:.9em}
th,td{border:1px solid #d0d7de;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#eef1f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.msg{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.82em;white-space:pre-wrap;word-break:break-word}
ul.where{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:10px 10px 10px 30px;font-size:.9em}
ul.where li{margin:3px 0}code{font-size:.9em;word-break:break-all}
figure{background:#fff;border:1px solid #d0d7de;border-radius:6px;margin:16px 0;padding:10px}
figure img{width:100%;height:auto;display:block}figcaption{color:#3d444d;font-size:.88em;margin-top:6px}
details{margin:16px 0}summary{cursor:pointer;font-weight:600}td.what{font-size:.82em;color:#3d444d}
"""

#: Marks the body once every image has decoded (read by the browser test).
_SCRIPT = """
window.addEventListener("load",function(){var imgs=document.images,ok=0;
for(var i=0;i<imgs.length;i++){if(imgs[i].complete&&imgs[i].naturalWidth>0){ok++;}}
document.body.setAttribute("data-images-loaded",ok+"/"+imgs.length);});
"""


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value: float, fmt: str, key: str | None = None) -> str:
    return number(value, fmt, key)


def status_block(run: RunData) -> str:
    """The green/orange/red banner at the top of the page."""
    n = len(run.violations)
    steps = plural(len(run.steps), "step")
    if run.failed_step is not None:
        names = sorted({m.invariant for m in run.violations if m.failed})
        return (f'<div class="status fail" id="status">Run stopped at step {run.failed_step} by a breach of '
                f'{_esc(", ".join(names))}. See the message and the repro file below.</div>')
    if n:
        warned = sum(m.severity == "warning" for m in run.violations)
        of_which = f" ({plural(warned, 'warning')}: logged, never a stop)" if warned else ""
        return (f'<div class="status warn" id="status">{plural(n, "violation")}{of_which} in {steps}; '
                "the run went on.</div>")
    return f'<div class="status ok" id="status">Clean: no invariant broke in {steps}.</div>'


def segments_block(run: RunData) -> str:
    """The note on a log whose steps go back (a resume into the same log, two writers); empty otherwise."""
    return f'<p class="status warn" id="segments">{_esc(run.segments_note)}</p>' if run.segments_note else ""


def check_block(run: RunData) -> str:
    """The run-level count of degenerate groups against its prediction, with the z-score; empty without one."""
    check = degenerate_check(run)
    return "" if check is None else f'<p class="check" id="run-check">{html_prose(check.sentence())}</p>'


def _span_headers(run: RunData, span: Spans) -> list[str]:
    """The start/end column headers, worded as the captions word them (:func:`.facts.span_labels`)."""
    return [html.escape(h) for h in span_labels_of([int(s) for s in run.steps])]


def summary_table(run: RunData) -> str:
    """Start against end of the run for the headline metrics it logged (one column for a 1-step run)."""
    span = spans(len(run.steps))
    headers = _span_headers(run, span)
    width = len(headers)
    rows = [f'<tr><th>estimator</th><td colspan={width}>{_esc(run.estimator or "n/a")}</td></tr>']
    for label, key, fmt in SUMMARY_METRICS:
        series = run.series(key)
        if series is not None and run.has(key):
            values = ends(series, span)[-width:]
            cells = "".join(f"<td class=num>{_fmt(v, fmt, key)}</td>" for v in values)
            rows.append(f"<tr><th>{_esc(label)}</th>{cells}</tr>")
    head = "<tr><th></th>" + "".join(f"<th>{h}</th>" for h in headers) + "</tr>"
    return f'<table id="summary">{head}{"".join(rows)}</table>'


def where_block(run: RunData) -> str:
    """The run's other outputs that exist next to the log: JSONL, TensorBoard, W&B, repro files."""
    items = [f"<li><b>{_esc(loc.kind)}</b>: <code>{_esc(loc.path)}</code>"
             f"<br><span class=meta>{_esc(loc.how)}</span></li>"
             for loc in where_else(run.path)]
    return f'{dropped_note(run)}<ul class="where" id="where">{"".join(items)}</ul>'


def dropped_note(run: RunData) -> str:
    """A warning when a background sink dropped reports: the W&B/TensorBoard copies lack those steps."""
    from ...catalog.metrics import DROPPED_REPORTS_KEY

    series = run.series(DROPPED_REPORTS_KEY) if run.has(DROPPED_REPORTS_KEY) else None
    finite = series[np.isfinite(series)] if series is not None else np.empty(0)
    if not len(finite) or finite.max() <= 0:
        return ""
    return (f'<p class=warn id="dropped"><b>{plural(int(finite.max()), "step report")} dropped</b> by a blocked '
            "background sink (W&amp;B, TensorBoard or the console) while this run logged: those steps are missing "
            "there. This report and the JSONL log hold every step "
            f"(<code>{DROPPED_REPORTS_KEY}</code>).</p>")


def violations_table(run: RunData, limit: int = 50) -> str:
    if not run.violations:
        return "<p>No violations.</p>"
    rows = []
    for m in run.violations[:limit]:
        repro = f"<br>repro: <code>{_esc(m.repro_path)}</code>" if m.repro_path else ""
        rows.append(f"<tr><td class=num>{m.step}</td><td>{_esc(m.invariant)}</td><td>{_esc(m.severity)}</td>"
                    f"<td class=msg>{_esc(m.message)}{repro}</td></tr>")
    more = (f"<p>{len(run.violations) - limit} more not shown (all are in the JSONL log).</p>"
            if len(run.violations) > limit else "")
    head = "<tr><th>step</th><th>invariant</th><th>severity</th><th>message</th></tr>"
    return f'<table id="violations">{head}{"".join(rows)}</table>{more}'


def trainer_metrics_block(run: RunData) -> list[str]:
    """The trainer's own numbers: per audited key over the run, its value against the exact one (none: nothing)."""
    by_key: dict[tuple[str, str], list[dict]] = {}
    for row in run.trainer_metrics:
        by_key.setdefault((str(row.get("framework")), str(row.get("key"))), []).append(row)
    if not by_key:
        return []
    head = ("<tr><th>framework</th><th>key</th><th>steps</th><th>off</th><th>last trainer</th><th>last exact</th>"
            "<th>largest |gap|</th><th>causes</th></tr>")
    rows = []
    for (framework, key), seen in by_key.items():
        off = [r for r in seen if r.get("cause")]
        gap = max(abs(_num(r.get("trainer")) - _num(r.get("exact"))) for r in seen)
        causes = ", ".join(sorted({str(r["cause"]) for r in off})) or "&ndash;"
        rows.append(f"<tr><td>{_esc(framework)}</td><td><code>{_esc(key)}</code></td><td class=num>{len(seen)}</td>"
                    f"<td class=num>{len(off)}</td><td class=num>{_num(seen[-1].get('trainer')):.6g}</td>"
                    f"<td class=num>{_num(seen[-1].get('exact')):.6g}</td><td class=num>{gap:.3g}</td>"
                    f"<td>{causes}</td></tr>")
    note = ("<p>What the trainer logged against the monitor's exact value of the same step (docs/trainer_metrics.md)"
            "; a key off beyond its tolerance is a <code>trainer_metric</code> warning.</p>")
    return ["<h2>The trainer's own numbers</h2>", note, f'<table id="trainer-metrics">{head}{"".join(rows)}</table>']


def _num(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else float("nan")


def figure_block(name: str, title: str, caption: str, png: bytes) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure id="fig-{_esc(name)}"><img alt="{_esc(title)}" src="data:image/png;base64,{data}">'
            f"<figcaption><b>{_esc(title)}.</b> {html_prose(caption)}</figcaption></figure>")


def other_metrics(run: RunData, shown: Collection[str]) -> str:
    """Every logged metric no figure shows: its meaning (from the catalogue), start, end, min and max, collapsed."""
    from ...catalog.metrics import METRICS

    keys = [k for k in sorted(run.metrics) if k not in shown and run.has(k) and not constant_by_definition(k)]
    if not keys:
        return ""
    span = spans(len(run.steps))
    headers = _span_headers(run, span)
    rows = []
    for key in keys:
        values = run.series(key)
        if values is None:  # not reached: every key in keys was logged
            continue
        finite = values[np.isfinite(values)]
        cells = [*ends(values, span)[-len(headers):], float(finite.min()), float(finite.max())]
        meaning = METRICS[key].meaning if key in METRICS else "not a monitor key (add_metrics, or another writer)"
        rows.append(f"<tr><th><code>{_esc(key)}</code></th><td class=what>{html_prose(meaning)}</td>"
                    + "".join(f"<td class=num>{_fmt(v, '{:.4g}', key)}</td>" for v in cells) + "</tr>")
    head = ("<tr><th>metric</th><th>meaning</th>" + "".join(f"<th>{h}</th>" for h in headers)
            + "<th>min</th><th>max</th></tr>")
    return (f'<details id="other-metrics"><summary>Other logged metrics ({plural(len(keys), "key")} not in a figure)'
            f'</summary><table>{head}{"".join(rows)}</table></details>')


def render_page(run: RunData, figures: Sequence[tuple[str, str, str, bytes]], notes: Sequence[str] = (),
                shown: Collection[str] = frozenset(), health: str = "") -> str:
    """The whole page; ``figures`` are (name, title, caption, PNG bytes), ``shown`` the keys they display,
    ``health`` the Run health section that opens it (:mod:`.health_panel`)."""
    from .health_panel import CSS as HEALTH_CSS

    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    meta = ", ".join(f"{k}={v}" for k, v in run.meta.items() if isinstance(v, (int, float, str, bool)))
    steps = run.steps.tolist()
    covered = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}&ndash;{steps[-1]}"
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>grpo-monitor report: {_esc(run.path.parent.name or run.path.name)}</title>",
        f"<style>{_CSS}{HEALTH_CSS}</style></head><body><main>",
        "<h1>grpo-monitor report</h1>",
        f'<div class="meta">{_esc(run.path)} &middot; {plural(len(steps), "step")} ({covered}) '
        f"&middot; generated {when}"
        + (f"<br>{_esc(meta)}" if meta else "") + "</div>",
        health, status_block(run), segments_block(run), check_block(run), "<h2>Summary</h2>", summary_table(run),
        "<h2>Violations</h2>", violations_table(run), *trainer_metrics_block(run),
        "<h2>Where else to look</h2>", where_block(run),
        "<h2>Figures</h2>",
    ]
    parts += [figure_block(*fig) for fig in figures]
    parts += [f'<p class="meta note">{html_prose(note)}</p>' for note in notes]
    parts += [other_metrics(run, shown), f"<script>{_SCRIPT}</script>", "</main></body></html>"]
    return "\n".join(parts)
