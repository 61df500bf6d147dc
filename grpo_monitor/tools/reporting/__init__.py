"""Offline report of a run: PNG figures and one self-contained HTML page from the JSONL log.

>>> from grpo_monitor.tools.reporting import FIGURES
>>> [f.name for f in FIGURES][:2]
['violations', 'degenerate']
"""

from __future__ import annotations

import io
import os
from pathlib import Path

from ...files.writing import OutputDir
from .data import RunData, find_log, load_run
from .digest import log_digest
from .facts import sentences
from .figures import ALL_FIGURES, FIGURES, how_to_log
from .html import render_page
from .plots_core import FigureSpec
from .records import LogFormatError, read_step_records

__all__ = [
    "FIGURES", "FigureSpec", "LogFormatError", "RunData", "build_report", "find_log", "load_run", "log_digest",
    "read_step_records", "render_figures",
]


#: Figure files of earlier versions, removed by a rebuild: old name -> the figure that holds it now.
RENAMED: dict[str, str] = {"history": "overdispersion_stuck"}


def render_figures(run: RunData) -> tuple[list[tuple[str, str, str, bytes]], list[str]]:
    """(name, title, caption, PNG bytes) of every figure the run has data for, and notes on the others."""
    figures, notes = [], []
    for spec in ALL_FIGURES:
        fig = spec.draw(run)
        if fig is None:
            if spec.name != "violations" and spec in FIGURES:
                notes.append(sentences([f"{spec.title}: no data in this run",
                                        how_to_log(spec, run.integration, run.settings)]))
            continue
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=100)
        figures.append((spec.name, spec.title, spec.caption(run), buffer.getvalue()))
    return figures, notes


def shown_keys(names: set[str] | list[str]) -> set[str]:
    """The metric keys drawn or stated by the named figures."""
    return {key for spec in ALL_FIGURES if spec.name in names for key in spec.keys}


def build_report(run: str | os.PathLike, out_dir: str | os.PathLike | None = None) -> Path:
    """Write ``plots/<name>.png`` and ``report.html`` into ``out_dir`` (default: the run folder).

    Returns the path of the HTML page. PNGs of figures an earlier build drew and this run
    lacks are removed, so ``plots/`` always matches the page. Every file is created without
    following a symlink (:mod:`grpo_monitor.files.writing`); a ``plots`` symlink is refused.
    """
    from .health_panel import evidence_plots, health_section, run_timeline

    data = load_run(run)
    figures, notes = render_figures(data)
    drawn = {name for name, _, _, _ in figures}
    found = run_timeline(data)
    evidence = evidence_plots(data, found)
    page = render_page(data, figures, notes, shown=shown_keys(drawn), health=health_section(data, found, evidence))
    with OutputDir(Path(out_dir) if out_dir is not None else data.path.parent) as out, out.folder("plots") as plots:
        for stale in [spec.name for spec in ALL_FIGURES if spec.name not in drawn] + list(RENAMED):
            plots.remove(f"{stale}.png")
        for name, _, _, png in figures:
            plots.write(f"{name}.png", png)
        return out.write("report.html", page)
