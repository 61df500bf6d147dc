"""The report's opening **Run health** section: the status, each finding with its evidence plot and remedies,
the question-export command, and the findings the log cannot support.

The verdicts are the live run's ``health`` records when the log holds them on every step, else the
:class:`~grpo_monitor.health.HealthTracker` replayed over the log's metrics (:mod:`.health_timeline`).
Each finding's evidence plot draws its main figure and evidence keys the run logged, the steps it was open
shaded; it is inlined in the page as an SVG ``<image>`` of the PNG (not an ``<img>`` nor a file in ``plots/``,
which hold the figures of the report's catalogue only).
"""

from __future__ import annotations

import base64
import html
import io
import re
from typing import Any

import numpy as np

from .data import RunData
from .facts import plural
from .health_timeline import STATUS_NAMES, FindingRecord, Timeline, timeline

#: The banner class per status (the report's CSS: .ok green, .warn orange, .fail red).
_BANNER = {0: "ok", 1: "warn", 2: "fail"}
#: Panels per evidence plot at most (the finding's figure first, then its evidence keys in catalogue order).
MAX_PANELS = 3
PLOT_PREFIX = "health_"  # the key of a finding's evidence plot

CSS = """
#run-health .finding{background:#fff;border:1px solid #d0d7de;border-radius:6px;margin:8px 0;padding:8px 12px}
#run-health .finding h3{font-size:1em;margin:0 0 4px}#run-health .sev{font-size:.8em;padding:1px 6px;
border-radius:4px;margin-left:6px}.sev.stalled{background:#ffebe9}.sev.degraded{background:#fff8c5}
.sev.info{background:#ddf4ff}#run-health ul{margin:4px 0 4px 18px;padding:0;font-size:.9em}
#run-health .finding p{margin:4px 0;font-size:.9em}
"""


def run_timeline(run: RunData) -> Timeline:
    """The run's health over its steps: recorded verdicts, or the tracker over the log's metrics."""
    steps = [int(s) for s in run.steps]
    metrics = {s: {k: float(v[i]) for k, v in run.metrics.items() if np.isfinite(v[i])} for i, s in enumerate(steps)}
    return timeline(steps, metrics, run.health, run.integration, _config(run))


def _config(run: RunData) -> Any:
    """The run's MonitorConfig where its run record holds one (the health settings it ran with), else defaults."""
    from ...config import MonitorConfig

    fields = set(MonitorConfig.model_fields)
    try:
        return MonitorConfig(**{k: v for k, v in run.config.items() if k in fields})
    except (ValueError, TypeError):  # a damaged or older run record: the defaults
        return MonitorConfig()


def evidence_plots(run: RunData, found: Timeline) -> dict[str, bytes]:
    """``health_<name>`` -> PNG of each finding's evidence (findings with no logged evidence key get none)."""
    out = {}
    for record in found.findings:
        keys = _plotted_keys(run, record.name)
        if keys:
            out[PLOT_PREFIX + record.name] = _plot(run, record, keys)
    return out


def _plotted_keys(run: RunData, name: str) -> list[str]:
    from ...health.catalog import FINDINGS

    finding = FINDINGS.get(name)
    keys = [finding.key, *finding.evidence] if finding is not None else [f"grpo/health/{name}"]
    return [k for k in dict.fromkeys(keys) if run.has(k)][:MAX_PANELS]


def _plot(run: RunData, record: FindingRecord, keys: list[str]) -> bytes:
    from .plots_core import figure

    fig, axes = figure(len(keys), height=1.5)
    steps = run.steps.astype(float)
    for ax, key in zip(axes, keys, strict=True):
        values = run.series(key)
        ax.plot(steps, values, marker="o", markersize=3, color="#0969da", label=key)
        for first, last in _runs(record.open_steps):
            ax.axvspan(first - 0.5, last + 0.5, color="#ff8182", alpha=0.25, lw=0)
        ax.set_ylabel(key.rsplit("/", 1)[-1], fontsize=8)
        ax.set_title(key, fontsize=8, loc="left")
        ax.tick_params(labelsize=7)
    axes[-1].set_xlabel("step (shaded: finding open)", fontsize=8)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    return buffer.getvalue()


def _runs(steps: list[int]) -> list[tuple[int, int]]:
    """Consecutive runs of steps.

    >>> _runs([1, 2, 3, 7, 9, 10])
    [(1, 3), (7, 7), (9, 10)]
    """
    out: list[tuple[int, int]] = []
    for s in steps:
        if out and s == out[-1][1] + 1:
            out[-1] = (out[-1][0], s)
        else:
            out.append((s, s))
    return out


def health_section(run: RunData, found: Timeline, plots: dict[str, bytes]) -> str:
    """The section's HTML (it opens the report)."""
    parts = ['<section id="run-health"><h2>Run health</h2>', _banner(run, found)]
    parts += [_finding(record, plots.get(PLOT_PREFIX + record.name), len(run.steps)) for record in found.findings]
    parts.append(_export(run))
    if found.unsupported:
        items = "".join(f"<li><b>{_esc(n)}</b>: {_esc(r)}</li>" for n, r in found.unsupported.items())
        parts.append(f'<details id="health-unsupported"><summary>Findings this log cannot support '
                     f"({len(found.unsupported)})</summary><ul>{items}</ul></details>")
    parts.append("</section>")
    return "\n".join(parts)


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _prose(text: object) -> str:
    """Escaped text whose `backticked` spans (option names, commands) become <code>.

    >>> _prose("raise `max_completion_length` <now>")
    'raise <code>max_completion_length</code> &lt;now&gt;'
    """
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _esc(text))


def _banner(run: RunData, found: Timeline) -> str:
    how = "as the run saw them" if found.recorded else "recomputed from the log's metrics"
    steps = plural(len(run.steps), "step")
    if not found.findings:
        text = f"Run health: healthy. No finding opened in {steps} (verdicts {how})."
    elif not found.worst_status:  # info findings only: the run never left healthy
        names = ", ".join(r.name for r in found.findings)
        text = f"Run health: healthy at every one of {steps}. For information: {names} (verdicts {how})."
    else:
        worst = STATUS_NAMES.get(found.worst_status, str(found.worst_status))
        names = ", ".join(r.name for r in found.findings)
        text = (f"Run health: {worst} (first at step {found.worst_step}; at the last step: "
                f"{STATUS_NAMES.get(found.last_status, found.last_status)}). Findings: {names} (verdicts {how}).")
    return f'<div class="status {_BANNER.get(found.worst_status, "warn")}" id="health-status">{_esc(text)}</div>'


def _finding(record: FindingRecord, png: bytes | None, total: int) -> str:
    state = record.last
    span = f"open since step {record.first_opened}" if record.cleared_at is None else \
        f"opened at step {record.first_opened}, cleared at step {record.cleared_at}"
    evidence = ", ".join(f"<code>{_esc(k)}</code> {_num(v)}" for k, v in (state.get("evidence") or {}).items())
    remedies = "".join(f"<li>{_prose(r)}</li>" for r in state.get("remedies") or ())
    image = "" if png is None else _inline(png, f"evidence of {record.name}")
    return (f'<div class="finding" id="finding-{_esc(record.name)}"><h3>{_esc(record.name)}'
            f'<span class="sev {_esc(record.worst)}">{_esc(record.worst)}</span></h3>'
            f"<p class=meta>{span}; open on {record.steps_open} of {plural(total, 'step')}; figure "
            f"{_num(state.get('figure'))}</p><p>{_prose(state.get('message', ''))}</p>"
            + (f"<p class=meta>evidence at step {_esc(state.get('step', '?'))}: {evidence}</p>" if evidence else "")
            + (f"<p><b>Remedies</b></p><ul>{remedies}</ul>" if remedies else "")
            + (f"<details><summary>Evidence plot</summary>{image}</details>" if image else "") + "</div>")


def _inline(png: bytes, label: str) -> str:
    """The PNG as an inline SVG ``<image>`` (its pixel size from the PNG header), scaled to the page width."""
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    data = base64.b64encode(png).decode("ascii")
    return (f'<svg class="evidence" role="img" aria-label="{_esc(label)}" viewBox="0 0 {width} {height}" '
            f'width="100%" xmlns="http://www.w3.org/2000/svg"><image href="data:image/png;base64,{data}" '
            f'width="{width}" height="{height}"/></svg>')


def _num(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        return "n/a"
    return f"{value:.4g}"


def _export(run: RunData) -> str:
    """The question-export commands for this run's log."""
    target = run.path.parent if run.path.name == "monitor.jsonl" else run.path
    items = "".join(f"<li><code>grpo-monitor questions {_esc(target)} --{c}</code></li>"
                    for c in ("saturated", "unsolved", "learnable"))
    return (f'<div class="meta" id="question-export">Question export: the ids of the questions saturated, '
            f"unsolved or learnable at every sighting, for your dataset filter:<ul>{items}</ul></div>")
