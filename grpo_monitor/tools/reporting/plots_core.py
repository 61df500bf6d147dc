"""What every figure of the report shares: the figure record, canvases, lines, axes fitted to the data.

Figures are built with ``matplotlib.figure.Figure`` (Agg canvas, no pyplot state), so
rendering never depends on a display or changes a global backend. Every time-axis panel
marks the run's violations as vertical lines (red: the step that stopped the run).
Reference lines are drawn on top of the data, dashed, and the y range is fitted so that
neither they nor the data sit on a border.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .data import RunData

if TYPE_CHECKING:  # matplotlib is optional and imported where a figure is drawn
    from matplotlib.figure import Figure

BLUE, ORANGE, GREEN, GREY, RED, PURPLE = "#1f77b4", "#ff7f0e", "#2ca02c", "#555555", "#d62728", "#9467bd"
_MARK_COLORS = ("#9467bd", "#e377c2", "#8c564b", "#bcbd22", "#17becf", "#7f7f7f", "#ff9896")  # red: the stopping breach
#: Values at or below this are drawn at the floor of log-scale panels (exact zeros included).
LOG_FLOOR = 1e-17


@dataclasses.dataclass(frozen=True)
class FigureSpec:
    """A figure of the report: file stem, title, the metric keys it draws, how to draw it and its caption.

    ``draw`` returns None when the run logged nothing the figure shows; ``caption`` states
    what the figure shows for this run, computed from the same data; ``note``: whether a run
    without it gets a note saying how to log it.
    """

    name: str
    title: str
    keys: tuple[str, ...]
    draw: Callable[[RunData], Figure | None]
    caption: Callable[[RunData], str]
    note: bool = True


def figure(rows: int = 1, height: float = 3.0):
    """A Figure 9 inches wide with ``rows`` stacked panels sharing the step axis."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, height * rows), dpi=100, layout="constrained")
    axes = fig.subplots(rows, 1, squeeze=False)
    return fig, [row[0] for row in axes]



def stacked(run: RunData, keys: Sequence[str], draw: Callable[[Any, str], None], height: float = 2.5):
    """One stacked panel per key the run logged, each drawn by ``draw(ax, key)``, the step axis labelled under
    the last: the figure, or None when the run logged none of ``keys``."""
    present = [k for k in keys if run.has(k)]
    if not present:
        return None
    fig, axes = figure(len(present), height=height)
    for ax, key in zip(axes, present, strict=True):
        draw(ax, key)
    axes[-1].set_xlabel("step")
    return fig


def rolling_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Centred moving average ignoring NaN (NaN where the window holds no finite value).

    >>> rolling_mean(np.array([0., 1., np.nan, 3.]), 3).tolist()
    [0.5, 0.5, 2.0, 3.0]
    """
    finite = np.isfinite(values)
    kernel = np.ones(window)
    sums = np.convolve(np.where(finite, values, 0.0), kernel, mode="same")
    counts = np.convolve(finite.astype(float), kernel, mode="same")
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def window(run: RunData) -> int:
    """The moving-average width: odd, about a twentieth of the run, 1 below 40 steps."""
    return max(1, (len(run.steps) // 20) | 1)


def _marker(run: RunData) -> dict:
    """Markers on short runs, where a line between few points (or one) would not show."""
    return {"marker": "o", "ms": 4} if len(run.steps) <= 30 else {}


def noisy(ax, run: RunData, values: np.ndarray | None, color: str, label: str) -> None:
    """Per-step values faint, their moving average bold; nothing when the metric was never logged."""
    if values is None:
        return
    w = window(run)
    if w > 1:
        ax.plot(run.steps, values, color=color, alpha=0.3, lw=0.8)
    ax.plot(run.steps, rolling_mean(values, w) if w > 1 else values, color=color, lw=2,
            label=f"{label} ({w}-step mean)" if w > 1 else label, **_marker(run))


def line(ax, run: RunData, values: np.ndarray | None, color: str, label: str, style: object = "--", **kw) -> None:
    """One series against the step (markers on short runs); nothing when it holds no finite value."""
    if values is not None and np.isfinite(values).any():
        ax.plot(run.steps, values, ls=style, color=color, lw=2.2 if style == "-" else 1.6, label=label,
                **{**_marker(run), **kw})


def smoothed(run: RunData, values: np.ndarray | None) -> np.ndarray | None:
    """The same moving average as the observed series, so the two compare like with like."""
    w = window(run)
    return rolling_mean(values, w) if values is not None and w > 1 else values


def reference(ax, y: float, color: str, label: str | None) -> None:
    """A horizontal reference line drawn above the data, so it stays visible where they coincide."""
    ax.axhline(y, color=color, ls=(0, (5, 3)), lw=1.4, label=label, zorder=4)


def mark_violations(ax, run: RunData) -> None:
    """Vertical lines at every violation (dotted purple; solid red: the breach that stopped the run).

    Two legend entries at most: the Violations figure and the table name each breach.
    """
    labelled: set[bool] = set()
    for mark in run.violations:
        label = None
        if mark.failed not in labelled:
            labelled.add(mark.failed)
            label = "breach that stopped the run" if mark.failed else "violation (see the Violations figure)"
        ax.axvline(mark.step, color=RED if mark.failed else PURPLE, lw=2.2 if mark.failed else 1.2, alpha=0.8,
                   ls="-" if mark.failed else ":", label=label)


def set_steps(ax, run: RunData) -> None:
    """Integer step ticks and half a step (or 2% of the run) of room at both ends."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # a 1-step run: one tick, 0
    lo, hi = float(run.steps[0]), float(run.steps[-1])
    pad = max(0.5, 0.02 * (hi - lo))
    ax.set_xlim(lo - pad, hi + pad)


def finish(ax, run: RunData, ylabel: str, title: str, headroom: bool = True) -> None:
    """Violations, integer steps, title, grid, and the legend in room made for it above the data.

    With ``headroom`` the y range grows upwards by the legend's height, so the legend covers
    neither the data nor a reference line; without it (heatmaps) there is no legend.
    """
    mark_violations(ax, run)
    set_steps(ax, run)
    ax.set_title(title, fontsize=10, loc="left")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if not handles or not headroom:  # a heatmap has no free space: its title says what the vertical lines are
        return
    separate_coinciding(ax)  # may lengthen labels: before the legend's columns are chosen
    handles, labels = ax.get_legend_handles_labels()
    ncol = _columns(labels, _axes_width(ax))
    _make_headroom(ax, rows=-(-len(handles) // ncol))
    ax.legend(fontsize=8, loc="upper left", ncol=ncol, framealpha=0.9, borderaxespad=0.3)


#: Markers that tell coinciding series apart, in turn: (marker, size); hollow, in the series' colour.
_APART = (("o", 9.0), ("s", 6.5), ("^", 6.5), ("D", 5.0))
#: Two series closer than this (pixels, about a line's width) at most steps would hide one another.
COINCIDE_PX = 3.0
#: ... "most steps": this share of the steps where both are finite.
COINCIDE_SHARE = 0.75


def separate_coinciding(ax) -> None:
    """Make every labelled series visible where it would sit on another one (within 3 px at 3 steps in 4).

    A series drawn on an earlier one becomes hollow markers in its own colour (no line), so
    the line below shows through, and its legend entry says which series it coincides with;
    a series lying on a horizontal reference line gets filled markers. Every figure gets this
    from :func:`finish`, so no legend entry names a line nobody can see.
    """
    data = [ln for ln in ax.get_lines() if _labelled(ln) and ln.get_transform() == ax.transData]
    refs = [ln for ln in ax.get_lines() if ln.get_transform() == ax.get_yaxis_transform()]
    used = 0
    for j, later in enumerate(data):
        under = next((e for e in data[:j] if _coincide(ax, e, later)), None)
        if under is not None:
            marker, size = _APART[used % len(_APART)]
            used += 1
            later.set(linestyle="none", marker=marker, markersize=size, markerfacecolor="none",
                      markeredgewidth=1.6, markevery=_every(later))
            later.set_label(f"{later.get_label()} (coincides with {_short(under.get_label())})")
            continue
        ref = next((r for r in refs if _coincide(ax, r, later)), None)
        if ref is not None:
            later.set(marker="o", markersize=6, markevery=_every(later))
            if _labelled(ref):
                later.set_label(f"{later.get_label()} (on the line {_short(ref.get_label())})")


def _labelled(line) -> bool:
    label = line.get_label()
    return bool(label) and not label.startswith("_")


def _short(label: str) -> str:
    """A legend label without its parenthesised aside: ``grpo/kl/user_mean (the KL ...)`` -> ``grpo/kl/user_mean``."""
    return label.split(" (")[0]


def _every(line) -> int:
    """At most about 40 markers along a series."""
    return max(1, len(line.get_xdata()) // 40)


def _coincide(ax, a, b) -> bool:
    """Whether ``b`` lies within COINCIDE_PX of ``a`` at COINCIDE_SHARE of the steps where both are finite."""
    xb, yb = (np.asarray(v, dtype=float) for v in (b.get_xdata(), b.get_ydata()))
    if a.get_transform() == ax.get_yaxis_transform():  # a horizontal reference: one y for every x
        ya = np.full_like(yb, float(np.asarray(a.get_ydata(), dtype=float)[0]))
    else:
        xa, ya = (np.asarray(v, dtype=float) for v in (a.get_xdata(), a.get_ydata()))
        if xa.shape != xb.shape or not np.array_equal(xa, xb):
            return False
    both = np.isfinite(ya) & np.isfinite(yb) & np.isfinite(xb)
    if not both.any():
        return False
    pa = ax.transData.transform(np.column_stack([xb[both], ya[both]]))[:, 1]
    pb = ax.transData.transform(np.column_stack([xb[both], yb[both]]))[:, 1]
    return bool(np.mean(np.abs(pa - pb) <= COINCIDE_PX) >= COINCIDE_SHARE)


def _axes_width(ax) -> float:
    """About how wide (inches) the panels of ``ax``'s figure are: the figure less the y labels' room.

    Category tick labels (set as text, e.g. the convention names) widen the left margin of
    every panel, since constrained layout aligns them.
    """
    fig = ax.get_figure()
    longest = max((len(t.get_text()) for a in fig.axes for t in a.get_yticklabels()), default=0)
    return fig.get_size_inches()[0] - 1.2 - max(0.0, 0.075 * longest - 0.5)


def _columns(labels: list[str], width: float) -> int:
    """The most legend columns (up to 3) whose labels fit in ``width`` inches at font size 8."""
    for ncol in (3, 2):
        # matplotlib fills column by column, the first len % ncol columns one entry longer than the others
        rows, extra = divmod(len(labels), ncol)
        sizes = [rows + (i < extra) for i in range(ncol)]
        starts = np.cumsum([0, *sizes])
        columns = [labels[starts[i]:starts[i + 1]] for i in range(ncol)]
        if len(labels) >= ncol and sum(0.058 * max(map(len, c)) + 0.6 for c in columns if c) <= width:
            return ncol
    return 1


def _make_headroom(ax, rows: int) -> None:
    """Raise the top of the y range so that ``rows`` legend rows fit above everything drawn."""
    from matplotlib.ticker import PercentFormatter

    fig = ax.get_figure()
    panels = max(1, len(fig.axes))
    axes_height = max(0.8, fig.get_size_inches()[1] / panels - 0.75)  # inches, less title and tick labels
    share = min(0.6, (0.17 * rows + 0.1) / axes_height)
    lo, hi = ax.get_ylim()
    ticks = [t for t in ax.get_yticks() if lo <= t <= hi]  # none in the legend's room
    if ax.get_yscale() == "log":
        a, b = np.log10(lo), np.log10(hi)
        ax.set_ylim(lo, 10 ** (a + (b - a) / (1 - share)))
    else:
        ax.set_ylim(lo, lo + (hi - lo) / (1 - share))
    if isinstance(ax.yaxis.get_major_formatter(), PercentFormatter):
        ticks = [t for t in ticks if t <= 1.0 + 1e-9]
    ax.set_yticks(ticks)


def _drawn(ax) -> np.ndarray:
    """Every finite y value in data units: data lines and horizontal references, not the violation marks."""
    ys = [np.asarray(ln.get_ydata(), dtype=float) for ln in ax.get_lines()
          if ln.get_transform() is not ax.get_xaxis_transform()]  # axvline: y in axes units
    values = np.concatenate(ys) if ys else np.zeros(0)
    return values[np.isfinite(values)]


def fit_ylim(ax, floor: float | None = None, min_span: float = 0.0, extra: Sequence[float] = (),
             integer: bool = False) -> None:
    """A linear y range holding every drawn value and ``extra`` with 18% room on both sides.

    ``min_span`` keeps a flat series from being blown up to rounding noise; below ``floor``
    (e.g. 0 for counts) only a sliver is shown, so values at the floor stay off the border.
    ``integer`` puts ticks on whole numbers (counts).
    """
    from matplotlib.ticker import MaxNLocator

    values = np.concatenate([_drawn(ax), np.asarray(extra, dtype=float)])
    values = values[np.isfinite(values)]
    if not values.size:
        return
    lo, hi = float(values.min()), float(values.max())
    span = max(hi - lo, min_span, 1e-12 * max(abs(lo), abs(hi), 1.0))
    centre = (lo + hi) / 2
    low, high = min(lo, centre - span / 2), max(hi, centre + span / 2)
    if floor is not None and low < floor <= lo:  # widen upwards instead of below the floor
        low, high = floor, high + (floor - low)
    pad = 0.18 * (high - low)
    bottom, top = low - pad, high + pad
    if floor is not None and bottom < floor <= lo:  # a sliver below the floor keeps values at it off the border
        bottom = floor - 0.04 * (top - floor)
    ax.set_ylim(bottom, top)
    if integer:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def percent(ax, values: Sequence[np.ndarray] = ()) -> None:
    """A rate axis: percent ticks from 0 to a little above the largest value drawn (zeros kept off the border)."""
    from matplotlib.ticker import PercentFormatter

    drawn = [*_drawn(ax).tolist(), *(v for arr in values for v in np.asarray(arr, float)[np.isfinite(arr)])]
    top = min(1.06, max(drawn, default=1.0) * 1.18 + 0.01)
    ax.set_ylim(-0.04 * top, top)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0 if top >= 0.1 else None))


def log_panel(ax, run: RunData, values: np.ndarray | None, color: str, label: str,
              references: Sequence[tuple[float, str, str]] = ()) -> None:
    """A max-type series on a log axis (zeros at :data:`LOG_FLOOR`), its references, the range fitted."""
    shown = []
    if values is not None and np.isfinite(values).any():
        drawn = np.clip(values, LOG_FLOOR, None)
        ax.semilogy(run.steps, drawn, color=color, lw=1.6, label=label, **_marker(run))
        shown.append(drawn[np.isfinite(drawn)])
    for y, ref_color, ref_label in references:
        reference(ax, y, ref_color, ref_label)
        shown.append(np.array([y]))
    everything = np.log10(np.concatenate(shown)) if shown else np.zeros(1)
    lo, hi = float(everything.min()), float(everything.max())
    pad = max(1.5, 0.12 * (hi - lo))  # in decades: neither the data nor a reference on a border
    ax.set_yscale("log")
    ax.set_ylim(10 ** (lo - pad), 10 ** (hi + pad))
