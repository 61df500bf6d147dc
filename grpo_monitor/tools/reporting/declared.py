"""The one renderer of the figures metric families declare as data (:class:`grpo_monitor.catalog.family.FigureSpec`).

A family's module says what its figure shows (panels of lines, a mean in a +-1 std band,
shares stacked into a histogram over time, or a histogram key's values as a heat map over
steps; every step's histogram lists pooled into a scatter or a histogram; the caption's
statements); this module draws
any such spec and writes its caption, so a family's figure needs no code in the report.
:func:`report_spec` turns a declared figure into the report's own
:class:`~grpo_monitor.tools.reporting.plots_core.FigureSpec`.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ...catalog.family import FigureSpec as Declared
from ...catalog.family import Panel, Slope, Value
from .captions import breaches
from .data import RunData
from .facts import change, peak, sentences
from .notes import advice
from .plots_core import (
    BLUE,
    GREEN,
    GREY,
    LOG_FLOOR,
    ORANGE,
    PURPLE,
    RED,
    FigureSpec,
    figure,
    finish,
    fit_ylim,
    line,
    log_panel,
    percent,
)
from .plots_core import reference as reference_line

COLORS = {"blue": BLUE, "orange": ORANGE, "green": GREEN, "red": RED, "grey": GREY, "purple": PURPLE,
          "mid grey": "#7f7f7f"}
#: About how tall (pixels) a band panel's axes are, and the band height below which its line covers it.
_AXES_PX, _BAND_PX = 150.0, 12.0


class _Settings(dict):
    """A label's ``{name}``: the run's MonitorConfig value, else the field's default (``{tolerances.name}``: a
    tolerance's, :func:`tolerance`)."""

    def __init__(self, run: RunData) -> None:
        super().__init__()
        self.run = run

    def __missing__(self, name: str) -> Any:
        from ...config import MonitorConfig

        if name == "tolerances":
            return _Tolerances(self.run)
        value = self.run.config.get(name)
        return value if isinstance(value, (int, float)) else MonitorConfig.model_fields[name].default


class _Tolerances:
    """``{tolerances.<name>}``: the run's tolerance (:func:`tolerance`)."""

    def __init__(self, run: RunData) -> None:
        self.run = run

    def __getattr__(self, name: str) -> float:
        return tolerance(self.run, name)


def tolerance(run: RunData, name: str) -> float:
    """``tolerances.<name>`` from the run record's config, else the default (:class:`...config.Tolerances`)."""
    from ...config import Tolerances

    declared = run.config.get("tolerances")
    value = declared.get(name) if isinstance(declared, dict) else None
    return float(value) if isinstance(value, (int, float)) else float(getattr(Tolerances(), name))


def value(v: Value, run: RunData) -> float:
    """A declared number: itself, or offset + scale x the run's setting (``"tolerances.<name>"``: a tolerance)."""
    if not isinstance(v, tuple):
        return float(v)
    offset, scale, name = v
    setting = tolerance(run, name.split(".", 1)[1]) if name.startswith("tolerances.") else _Settings(run)[name]
    return offset + scale * float(setting)


def _format(text: str, run: RunData) -> str:
    return text.format_map(_Settings(run)) if text else text


def _labels(panel: Panel, run: RunData) -> list[str]:
    """One label per key, then per overlay key."""
    keys = (*panel.keys, *panel.overlay)
    given = list(panel.labels) + [""] * (len(keys) - len(panel.labels))
    return [_format(label, run) if label else key for label, key in zip(given, keys, strict=True)]


def _colors(panel: Panel) -> list[str]:
    """One colour per key, then per overlay key."""
    names = list(panel.colors) + [c for c in COLORS if c not in panel.colors]
    return [COLORS[name] for name in names[:len(panel.keys) + len(panel.overlay)]]


def _styles(panel: Panel) -> list[str]:
    return [panel.styles[i] if i < len(panel.styles) else "-" if i == 0 else "--" for i in range(len(panel.keys))]


def _logged(panel: Panel, run: RunData) -> bool:
    if panel.kind == "heatmap":
        return histogram_matrix(run, panel.keys[0]) is not None
    if panel.kind in ("scatter", "histogram"):
        return bool(pooled(run, panel.keys[0]))
    return any(run.has(k) for k in (*panel.keys, *panel.overlay))


def draw(spec: Declared, run: RunData):
    """The figure: one panel per panel of ``spec`` the run logged a key of (side by side: every panel, once the
    first is logged); None when it logged none."""
    if spec.columns:
        return _columns(spec, run)
    panels = [p for p in spec.panels if _logged(p, run)]
    if not panels:
        return None
    fig, axes = figure(len(panels), height=spec.height)
    for ax, panel in zip(axes, panels, strict=True):
        _KINDS[panel.kind](ax, panel, run)
    axes[-1].set_xlabel("step")
    return fig


def _columns(spec: Declared, run: RunData):
    """The panels side by side, each with its own x axis; None when the first panel's keys are not logged."""
    if not _logged(spec.panels[0], run):
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, spec.height), dpi=100, layout="constrained")
    for ax, panel in zip(fig.subplots(1, len(spec.panels), squeeze=False)[0], spec.panels, strict=True):
        _KINDS[panel.kind](ax, panel, run)
    return fig


def _lines(ax, panel: Panel, run: RunData) -> None:
    """One line per key (its style, else the first solid), the reference lines, the y range fitted (or a percent
    axis)."""
    edges = _shades(ax, panel, run)
    for key, label, color, style in zip(panel.keys, _labels(panel, run), _colors(panel), _styles(panel), strict=True):
        line(ax, run, run.series(key), color, label, style)
    levels = [(value(y, run), _format(label, run)) for y, label in panel.references]
    for y, label in levels:
        reference_line(ax, y, COLORS[panel.reference_color], label or None)
    if panel.share:
        percent(ax)
    else:
        fit_ylim(ax, min_span=value(panel.min_span, run), extra=[y for y, _ in levels] + edges)
    finish(ax, run, panel.ylabel, panel.title)


def _shades(ax, panel: Panel, run: RunData) -> list[float]:
    """The panel's bands (light, no edge); their edges, for the y range."""
    edges = []
    for shade in panel.shades:
        low, high = value(shade.low, run), value(shade.high, run)
        ax.axhspan(low, high, color=COLORS[shade.color], alpha=0.18, lw=0, label=_format(shade.label, run))
        edges += [low, high]
    return edges


def _log(ax, panel: Panel, run: RunData) -> None:
    """One max-type series on a log axis (zeros drawn at the floor) with its references, then its bands, the range
    widened to each band's edges over / times its pad."""
    (label,), (color,) = _labels(panel, run), _colors(panel)
    log_panel(ax, run, run.series(panel.keys[0]), color, f"{label} (zeros drawn at {LOG_FLOOR:g})",
              [(value(y, run), COLORS[panel.reference_color], _format(text, run)) for y, text in panel.references])
    edges = _shades(ax, panel, run)
    pads = [s.pad for s in panel.shades]
    if edges:
        bottom, top = ax.get_ylim()
        ax.set_ylim(min(bottom, *(lo / p for lo, p in zip(edges[::2], pads, strict=True))),
                    max(top, *(hi * p for hi, p in zip(edges[1::2], pads, strict=True))))
    finish(ax, run, panel.ylabel, panel.title)


def _band(ax, panel: Panel, run: RunData) -> None:
    """The mean's line in a +-1 std band; where the band is thinner than the line, the title says so instead."""
    mean, std = run.series(panel.keys[0]), run.series(panel.keys[1])
    line_label, band_label = _labels(panel, run)
    color = _colors(panel)[0]
    band = None
    if mean is not None and std is not None:
        band = ax.fill_between(run.steps, mean - std, mean + std, color=color, alpha=0.3, lw=0)
    line(ax, run, mean, color, line_label, "-")
    extra = [] if mean is None or std is None else [*(mean - std), *(mean + std)]
    fit_ylim(ax, min_span=value(panel.min_span, run), extra=extra)
    title = panel.title
    if band is not None and std is not None:
        widest = float(np.nanmax(2 * std)) if np.isfinite(std).any() else 0.0
        lo, hi = ax.get_ylim()
        if widest / (hi - lo) * _AXES_PX > _BAND_PX:  # else the line covers the band: say so instead
            band.set_label(band_label)
        else:
            title += f" (+-1 std band thinner than the line: std at most {widest / 2:.2g} {panel.ylabel})"
    finish(ax, run, panel.ylabel, title)


def _fractions(ax, panel: Panel, run: RunData) -> None:
    """Shares that add up to 1, stacked at every step: a histogram over time (a bar per step on a 1-step run); the
    overlay keys as lines over it."""
    labels, colors = _labels(panel, run), _colors(panel)
    logged = {k: v for k in panel.keys if (v := run.series(k)) is not None}
    # a bin at 0 throughout would be a legend entry with nothing drawn: left out
    shown = [i for i, k in enumerate(panel.keys) if k in logged and np.nansum(np.abs(logged[k])) > 0]
    stacks = [np.nan_to_num(logged[panel.keys[i]], nan=0.0) for i in shown]
    if stacks:
        x = run.steps.astype(float)
        if len(x) == 1:  # an area over one point has no width
            x, stacks = np.array([x[0] - 0.4, x[0] + 0.4]), [np.repeat(v, 2) for v in stacks]
        ax.stackplot(x, *stacks, colors=[colors[i] for i in shown], alpha=0.55, labels=[labels[i] for i in shown])
    for i, key in enumerate(panel.overlay, start=len(panel.keys)):
        line(ax, run, run.series(key), colors[i], labels[i], "-")
    if panel.share:
        percent(ax, values=[np.sum(stacks, axis=0)] if stacks else [])
    else:
        top = [float(np.max(np.sum(stacks, axis=0)))] if stacks else []
        fit_ylim(ax, min_span=value(panel.min_span, run), extra=top)
    finish(ax, run, panel.ylabel, panel.title)


def histogram_matrix(run: RunData, key: str) -> np.ndarray | None:
    """A histogram key's values per (index, step): column j the list logged at step j (NaN past its end, and where
    a step logged none); None when no step logged one."""
    rows = run.histograms.get(key) or []
    width = max((len(r) for r in rows if r), default=0)
    if not width:
        return None
    out = np.full((width, len(rows)), np.nan)
    for j, r in enumerate(rows):
        if r:
            out[:len(r), j] = r
    return out


def _heatmap(ax, panel: Panel, run: RunData) -> None:
    """The histogram key's values as a colour map, index up, step across, with its colour bar."""
    matrix = histogram_matrix(run, panel.keys[0])
    assert matrix is not None  # drawn only when logged
    steps = run.steps.astype(float)
    x0, x1 = (steps[0] - 0.5, steps[-1] + 0.5) if len(steps) else (0, 1)
    top = 1.0 if panel.share else float(np.nanmax(matrix))
    image = ax.imshow(matrix, aspect="auto", origin="lower", cmap="viridis", vmin=float(np.nanmin(matrix)),
                      vmax=top, extent=(x0, x1, -0.5, matrix.shape[0] - 0.5), interpolation="nearest")
    ax.figure.colorbar(image, ax=ax, label=_labels(panel, run)[0])
    ax.set_ylabel(panel.ylabel)
    ax.set_title(panel.title, fontsize=10)


def pooled(run: RunData, key: str) -> list[list[float]]:
    """Every list a step logged of a histogram key (steps without one left out)."""
    return [h for h in run.histograms.get(key, []) if h]


def _scatter(ax, panel: Panel, run: RunData) -> None:
    """Every step's aligned (x, y) lists pooled: one dot per pair on log-log axes, the power laws through their
    geometric centre, the y range the points and that centre widened 4x each way (float noise on a flat line stays
    flat)."""
    xs, ys = (pooled(run, key) for key in panel.keys)
    x = np.concatenate([np.asarray(v, float) for v in xs])
    y = np.concatenate([np.asarray(v, float) for v in ys])
    ax.scatter(x, y, s=8, color=_colors(panel)[0], alpha=0.5, label=_labels(panel, run)[0])
    if len(x) > 1:
        grid = np.geomspace(x.min(), x.max(), 20)
        for label, power, slope in _powers(panel.slopes, run):
            scale = np.exp(np.mean(np.log(y)) - power * np.mean(np.log(x)))
            ax.plot(grid, scale * grid ** power, color=COLORS[slope.color], linestyle=slope.style, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log_ticks(ax)
    centre = float(np.exp(np.mean(np.log(y))))
    ax.set_ylim(min(y.min(), centre) / 4, max(y.max(), centre) * 4)
    ax.set_xlabel(panel.xlabel)
    ax.set_ylabel(panel.ylabel)
    ax.set_title(panel.title, fontsize=10)
    ax.legend(fontsize=8)


def _powers(slopes: tuple[Slope, ...], run: RunData) -> list[tuple[str, float, Slope]]:
    """(label, power, slope) of each line to draw (:class:`~grpo_monitor.catalog.family.Slope`)."""
    out: list[tuple[str, float, Slope]] = []
    for slope in slopes:
        given, name = _named(slope, run)
        if name is None or (slope.differs and out and all(slope.powers[name] == p for _, p, _ in out)):
            continue
        alias = f" ({name})" if given != name else ""
        power = slope.powers[name]
        out.append((slope.label.format(given=given, alias=alias, name=name, power=power), power, slope))
    return out


def _named(slope: Slope, run: RunData) -> tuple[str | None, str | None]:
    """(the value as set, the name it stands for) of a slope's setting, else of its index key's last value."""
    if slope.setting:
        given = run.config.get(slope.setting)
        if not isinstance(given, str):
            return None, None
        return given, given if given in slope.powers else slope.aliases.get(given)
    ids = run.series(slope.key)
    index = int(ids[np.isfinite(ids)][-1]) if ids is not None and np.isfinite(ids).any() else -1
    name = list(slope.powers)[index] if 0 <= index < len(slope.powers) else None
    return name, name


def _plain_log_ticks(ax) -> None:
    """Log axes labelled with plain numbers (``4``, ``0.5``), minor ticks too on a narrow range, not ``4x10^0``."""
    from matplotlib.ticker import LogFormatter

    class Plain(LogFormatter):
        def __call__(self, x, pos=None):  # the ticks LogFormatter labels, written as plain numbers
            return f"{x:g}" if super().__call__(x, pos) else ""

    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(Plain())
        axis.set_minor_formatter(Plain(labelOnlyBase=False, minor_thresholds=(1.2, 0.6)))


def _histogram(ax, panel: Panel, run: RunData) -> None:
    """Every step's values of one histogram key in 30 bins (a count of values per bin), a share panel's equal share
    marked; the axes labelled even without values."""
    from matplotlib.ticker import MaxNLocator

    lists = pooled(run, panel.keys[0])
    if lists:
        bars, mark = (COLORS[name] for name in [*panel.colors, "green", "orange"][:2])
        counts, _, _ = ax.hist(np.concatenate([np.asarray(v, float) for v in lists]), bins=30, color=bars, alpha=0.8)
        if panel.share:
            even = 1.0 / np.median([len(v) for v in lists])
            ax.axvline(even, color=mark, label=panel.labels[0].format(even=even))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # a count of values
        ax.set_ylim(0, max(1.0, float(np.max(counts))) * 1.3)  # headroom: the legend covers no bar
        if panel.share:
            ax.legend(fontsize=8, loc="upper right")
    ax.set_xlabel(panel.xlabel)
    ax.set_ylabel(panel.ylabel)
    ax.set_title(panel.title, fontsize=10)


_KINDS = {"lines": _lines, "band": _band, "fractions": _fractions, "heatmap": _heatmap, "log": _log,
          "scatter": _scatter, "histogram": _histogram}


def caption(spec: Declared, run: RunData) -> str:
    """The declared first sentence (with the run's settings), then each statement computed from the log (start
    against end) with its key's peak, the other peaks, what to set for each ``missing`` key the run lacks, and the
    invariant's breaches."""
    stated = {key for _, key, _ in spec.statements}
    parts: list[str | None] = [_format(spec.caption, run)]
    for label, key, fmt in spec.statements:
        parts.append(change(run.steps, label, run.series(key), fmt, key))
        parts += [peak(run, p, run.series(k), f) for p, k, f in spec.peaks if k == key]
    parts += [peak(run, p, run.series(k), f) for p, k, f in spec.peaks if k not in stated]
    parts += [f"This log has no {what}: {advice(key, run.integration, run.settings)}"
              for key, what in spec.missing if not run.has(key)]
    parts.append(breaches(run, spec.breaches) if spec.breaches else None)
    return sentences(parts)


def report_spec(spec: Declared) -> FigureSpec:
    """The report's record of a declared figure: drawn and captioned by this module."""
    return FigureSpec(spec.name, spec.title, spec.keys, functools.partial(draw, spec),
                      functools.partial(caption, spec), note=spec.note)
