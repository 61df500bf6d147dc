"""One self-contained HTML page: inline CSS, PNGs inlined as base64, no external asset."""

from __future__ import annotations

import base64
import datetime
import html
import math
from typing import Sequence

import numpy as np

from .data import RunData

#: (label, key, format) of the summary table: the first and last tenth of the run.
SUMMARY_METRICS: tuple[tuple[str, str, str], ...] = (
    ("degenerate rate (training batch)", "grpo/groups/degenerate_rate", "{:.1%}"),
    ("degenerate rate, iid prediction", "grpo/groups/degenerate_rate_iid", "{:.1%}"),
    ("degenerate rate (generated)", "grpo/sampling/generated_degenerate_rate", "{:.1%}"),
    ("effective prompts", "grpo/groups/effective_prompts", "{:.1f}"),
    ("mean reward", "grpo/reward/mean", "{:.3f}"),
    ("responses per retained group", "grpo/sampling/responses_per_retained_group", "{:.1f}"),
    ("KL k3 per token", "grpo/kl/k3_mean", "{:.4f}"),
    ("advantage std, live groups", "grpo/adv/live_std_mean", "{:.4f}"),
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
table{border-collapse:collapse;width:100%;background:#fff;font-size:.9em}
th,td{border:1px solid #d0d7de;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#eef1f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.msg{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.82em;white-space:pre-wrap;word-break:break-word}
figure{background:#fff;border:1px solid #d0d7de;border-radius:6px;margin:16px 0;padding:10px}
figure img{width:100%;height:auto;display:block}figcaption{color:#57606a;font-size:.88em;margin-top:6px}
"""

#: Marks the body once every image has decoded (read by the browser test).
_SCRIPT = """
window.addEventListener("load",function(){var imgs=document.images,ok=0;
for(var i=0;i<imgs.length;i++){if(imgs[i].complete&&imgs[i].naturalWidth>0){ok++;}}
document.body.setAttribute("data-images-loaded",ok+"/"+imgs.length);});
"""


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value: float, fmt: str) -> str:
    return "n/a" if value is None or not math.isfinite(value) else fmt.format(value)


def _ends(values: np.ndarray) -> tuple[float, float]:
    """Mean of the finite values in the first and in the last tenth of the run."""
    n = max(1, len(values) // 10)
    head, tail = values[:n], values[-n:]
    first = float(np.mean(head[np.isfinite(head)])) if np.isfinite(head).any() else math.nan
    last = float(np.mean(tail[np.isfinite(tail)])) if np.isfinite(tail).any() else math.nan
    return first, last


def status_block(run: RunData) -> str:
    """The green/orange/red banner at the top of the page."""
    n = len(run.violations)
    steps = len(run.steps)
    if run.failed_step is not None:
        names = sorted({m.invariant for m in run.violations if m.failed})
        return (f'<div class="status fail" id="status">Run stopped at step {run.failed_step} by a breach of '
                f'{_esc(", ".join(names))}. See the message and the repro file below.</div>')
    if n:
        return f'<div class="status warn" id="status">{n} violation(s) in {steps} steps; the run went on.</div>'
    return f'<div class="status ok" id="status">Clean: no invariant broke in {steps} steps.</div>'


def summary_table(run: RunData) -> str:
    rows = [
        f"<tr><th>step</th><td class=num>{int(run.steps[0])}</td><td class=num>{int(run.steps[-1])}</td></tr>",
        f"<tr><th>std convention</th><td colspan=2>{_esc(run.convention or 'n/a')}</td></tr>",
    ]
    for label, key, fmt in SUMMARY_METRICS:
        if run.has(key):
            first, last = _ends(run.series(key))
            rows.append(f"<tr><th>{_esc(label)}</th><td class=num>{_fmt(first, fmt)}</td><td class=num>{_fmt(last, fmt)}</td></tr>")
    head = "<tr><th></th><th>first tenth</th><th>last tenth</th></tr>"
    return f'<table id="summary">{head}{"".join(rows)}</table>'


def violations_table(run: RunData, limit: int = 50) -> str:
    if not run.violations:
        return "<p>No violations.</p>"
    rows = []
    for m in run.violations[:limit]:
        repro = f"<br>repro: <code>{_esc(m.repro_path)}</code>" if m.repro_path else ""
        rows.append(f"<tr><td class=num>{m.step}</td><td>{_esc(m.invariant)}</td><td class=msg>{_esc(m.message)}{repro}</td></tr>")
    more = f"<p>{len(run.violations) - limit} more not shown (all are in the JSONL log).</p>" if len(run.violations) > limit else ""
    return f'<table id="violations"><tr><th>step</th><th>invariant</th><th>message</th></tr>{"".join(rows)}</table>{more}'


def figure_block(name: str, title: str, caption: str, png: bytes) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure id="fig-{_esc(name)}"><img alt="{_esc(title)}" src="data:image/png;base64,{data}">'
            f"<figcaption><b>{_esc(title)}.</b> {_esc(caption)}</figcaption></figure>")


def render_page(run: RunData, figures: Sequence[tuple[str, str, str, bytes]], notes: Sequence[str] = ()) -> str:
    """The whole page; ``figures`` are (name, title, caption, PNG bytes)."""
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    meta = ", ".join(f"{k}={v}" for k, v in run.meta.items() if isinstance(v, (int, float, str, bool)))
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>grpo-monitor report: {_esc(run.path.parent.name or run.path.name)}</title>",
        f"<style>{_CSS}</style></head><body><main>",
        "<h1>grpo-monitor report</h1>",
        f'<div class="meta">{_esc(run.path)} &middot; {len(run.steps)} steps &middot; generated {when}'
        + (f"<br>{_esc(meta)}" if meta else "") + "</div>",
        status_block(run), "<h2>Summary</h2>", summary_table(run),
        "<h2>Violations</h2>", violations_table(run), "<h2>Figures</h2>",
    ]
    parts += [figure_block(*fig) for fig in figures]
    parts += [f'<p class="meta">{_esc(note)}</p>' for note in notes]
    parts += [f"<script>{_SCRIPT}</script>", "</main></body></html>"]
    return "\n".join(parts)
