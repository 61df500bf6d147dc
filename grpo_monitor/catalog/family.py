"""A metric family in one record: its catalogue entries, its readout from the synced sums and the figure it declares.

A family (the off-policy updates, the entropy, ...) lives in one module of this package
(``family_<name>.py``) that builds one :class:`Family`:

- ``metrics``: its :class:`~grpo_monitor.catalog.record.Metric` records; ``METRICS``, the
  dashboards and ``docs/metrics.md`` collect them (:data:`.families.FAMILIES`);
- ``readouts``: how its keys come from a synced statistics vector (plain floats by slot name,
  no torch): ``step/metrics.py`` and ``stats/tokens/readout.py`` call :func:`read_out` (and
  :func:`read_histograms`) once per vector and every family's readout of that vector follows;
- ``figures``: the report figure it declares, as data (:class:`FigureSpec` of :class:`Panel`),
  which ``grpo_monitor.tools.reporting`` draws with one generic renderer (the core never
  imports the tools);
- ``trends``: its rows in a scan's trend table (``grpo_monitor.tools.scan.summary``).

>>> Panel("lines", ("grpo/x",), "a title", "unit").labels
()
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from .record import Metric

#: The statistics vectors a readout reads: the rollout's (``observe_rollout``), the generation ledger's
#: (``observe_generation``), the token pass's and the MoE routing counts (both ``observe_loss``), each after
#: the step's sync.
VECTORS: tuple[str, ...] = ("rollout", "ledger", "tokens", "routing")
PanelKind = Literal["lines", "band", "fractions", "heatmap", "log", "scatter", "histogram"]
#: A number a figure draws, fixed or the run's own: ``(offset, scale, setting)`` is offset + scale x the run's
#: MonitorConfig value of ``setting`` (a tolerance as ``"tolerances.mismatch_k3"``), else its default.
Value = float | tuple[float, float, str]


@dataclasses.dataclass(frozen=True)
class Readout:
    """Keys of one synced vector: ``compute(values)`` when the count slot ``when`` is positive (always when "");
    ``histograms(values)`` its histogram keys (one list per step), under the same condition. ``setting``: a
    MonitorConfig field the readout also reads, ``compute(values, value)``, run only when the step sets it."""

    vector: str
    when: str
    compute: Callable[..., dict[str, float]]
    histograms: Callable[[Mapping[str, float]], dict[str, list[float]]] | None = None
    setting: str = ""


@dataclasses.dataclass(frozen=True)
class Shade:
    """A horizontal band of a panel from ``low`` to ``high`` (:data:`Value`: fixed or the run's setting), with its
    legend label (formatted with the run's settings, as a panel's labels). ``pad``: on a ``"log"`` panel, the y
    range reaches at least low / pad and high x pad."""

    low: Value
    high: Value
    label: str
    color: str = "green"
    pad: float = 1.0


@dataclasses.dataclass(frozen=True)
class Slope:
    """A power law y ~ x^p through a ``"scatter"`` panel's points (a line through their geometric centre on its
    log-log axes). p is ``powers``' value for a name: the run's MonitorConfig value of ``setting`` (a name of
    ``powers`` or an alias of one in ``aliases``), else the name at the last logged value of the index key ``key``
    (its position in ``powers``); no line without one. ``label`` is formatted with ``{given}`` (the value as set),
    ``{alias}`` (" (name)" when that is an alias), ``{name}`` and ``{power}``. ``differs``: drawn only when the
    panel's slopes before it drew none or another power."""

    label: str
    powers: Mapping[str, float]
    setting: str = ""
    key: str = ""
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    color: str = "red"
    style: str = "-"
    differs: bool = False


@dataclasses.dataclass(frozen=True)
class Panel:
    """One time-axis panel of a declared figure.

    ``kind``: ``"lines"`` (one line per key), ``"band"`` (keys ``(mean, std)``: the mean's line in a
    +-1 std band), ``"fractions"`` (shares of rows that add up to 1 at every step, stacked: a
    histogram over time; ``overlay``: keys drawn as lines over the stack), ``"heatmap"`` (one
    histogram key: its values per step as the columns of a colour map, value i on row i, as the
    agreement of each MoE layer), ``"log"`` (one key, a max-type series, on a log axis, zeros drawn at the
    floor); and two kinds that pool every step's lists of histogram keys, with their own x axis (``xlabel``):
    ``"scatter"`` (keys ``(x, y)``, aligned: one dot per pair on log-log axes, the y range the points and their
    geometric centre widened 4x each way, the power laws ``slopes`` through them) and ``"histogram"`` (one key's
    values in 30 bins, counts on the y axis; ``share``: the values are shares of each step's whole, the equal share
    1 / (the median count a step logged) marked by a line labelled ``labels[0]`` with ``{even}``; ``colors``: the
    bars' and that line's). ``labels``: one
    legend label per key, then per overlay key ("" for
    the key itself; a band's second label is the band's, a heat map's its colour bar's), formatted
    with the run's settings (``{entropy_low_threshold:g}``: the run's MonitorConfig value, else its
    default). ``colors``: one of blue, orange, green, red, grey, purple, mid grey per key, then per
    overlay key (default: in that order); ``styles``: a line style per key (default: the first
    solid, the others dashed). ``share``: a percent axis (a heat map's colour scale ends at 1).
    ``references``: ``(y, label)`` horizontal lines ("": no legend entry) in ``reference_color``; ``shades``:
    bands drawn under the lines (over a log panel's line); ``min_span``: the y range's least span. ``y``, a
    shade's edges and ``min_span`` are :data:`Value`: fixed, or the run's setting.
    """

    kind: PanelKind
    keys: tuple[str, ...]
    title: str
    ylabel: str
    labels: tuple[str, ...] = ()
    colors: tuple[str, ...] = ()
    styles: tuple[str, ...] = ()
    share: bool = False
    overlay: tuple[str, ...] = ()
    references: tuple[tuple[Value, str], ...] = ()
    reference_color: str = "grey"
    shades: tuple[Shade, ...] = ()
    min_span: Value = 0.0
    xlabel: str = ""
    slopes: tuple[Slope, ...] = ()


@dataclasses.dataclass(frozen=True)
class FigureSpec:
    """A report figure as data: file stem, title, panels, the caption's first sentence and its statements.

    ``caption``: its first sentence, formatted with the run's settings as a panel's labels are.
    ``statements``: ``(label, key, format)``: "<label> went from A in the first tenth of the run to B in
    the last tenth" and the like, computed from the log; ``peaks``: ``(label, key, format)``: "<label>
    peaked at X at step s", each after its key's statement (else after them all); ``missing``: ``(key,
    what)``: a run without the key gets "This log has no <what>" and what its integration sets to log
    it; ``breaches``: an invariant whose breached steps the caption lists. ``after``: the figure it
    follows on the page. ``note``: whether a run without its keys gets a note saying how to log them
    (False for a family only some trainers have, such as the off-policy one). ``height``: inches per panel.
    ``columns``: the panels side by side, each with its own x axis (not stacked over the steps), drawn when the
    first panel's keys are logged.
    """

    name: str
    title: str
    panels: tuple[Panel, ...]
    caption: str
    statements: tuple[tuple[str, str, str], ...]
    after: str
    peaks: tuple[tuple[str, str, str], ...] = ()
    missing: tuple[tuple[str, str], ...] = ()
    breaches: str = ""
    note: bool = True
    height: float = 2.6
    columns: bool = False

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key the figure draws or states, the principal one (the first panel's first) first."""
        keys = [k for p in self.panels for k in (*p.keys, *p.overlay, *(s.key for s in p.slopes if s.key))]
        keys += [k for _, k, _ in (*self.statements, *self.peaks)] + [k for k, _ in self.missing]
        return tuple(dict.fromkeys(keys))


@dataclasses.dataclass(frozen=True)
class Family:
    """One metric family: its name, records, readouts, declared figures and scan trend rows."""

    name: str
    metrics: tuple[Metric, ...]
    readouts: tuple[Readout, ...] = ()
    figures: tuple[FigureSpec, ...] = ()
    trends: tuple[tuple[str, str, str], ...] = ()

    def __post_init__(self) -> None:
        for r in self.readouts:
            if r.vector not in VECTORS:
                raise ValueError(f"family {self.name!r} reads vector {r.vector!r}; expected one of {VECTORS}")
        own = {m.key for m in self.metrics}
        drawn = [k for f in self.figures for k in f.keys] + [k for _, k, _ in self.trends]
        stray = [k for k in drawn if k not in own]
        if stray:
            raise ValueError(f"family {self.name!r} draws keys it does not catalogue: {stray}")
        kinds = {m.key: m.kind for m in self.metrics}
        wanted = {"heatmap": 1, "histogram": 1, "scatter": 2}
        pooled = [(p.kind, p.keys) for f in self.figures for p in f.panels if p.kind in wanted]
        if any(len(keys) != wanted[kind] or any(kinds[k] != "histogram" for k in keys) for kind, keys in pooled):
            raise ValueError(f"family {self.name!r} draws {pooled}; a heat map draws one histogram key (a "
                             "histogram too), a scatter two")


def read_out(families: Sequence[Family], vector: str, values: Mapping[str, float],
             settings: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Every family's keys of one synced vector, in family order; ``settings``: the step's values of the
    MonitorConfig fields a readout reads (:attr:`Readout.setting`; one not given is not set).

    >>> f = Family("demo", (), (Readout("ledger", "n", lambda v: {"grpo/demo/x": v["s"] / v["n"]}),))
    >>> read_out([f], "ledger", {"n": 2.0, "s": 1.0}), read_out([f], "ledger", {"n": 0.0, "s": 0.0})
    ({'grpo/demo/x': 0.5}, {})
    """
    out: dict[str, float] = {}
    for r in _due(families, vector, values):
        if not r.setting:
            out.update(r.compute(values))
        elif (settings or {}).get(r.setting) is not None:
            out.update(r.compute(values, (settings or {})[r.setting]))
    return out


def read_histograms(families: Sequence[Family], vector: str, values: Mapping[str, float]) -> dict[str, list[float]]:
    """Every family's histogram keys of one synced vector, in family order (:attr:`Readout.histograms`)."""
    out: dict[str, list[float]] = {}
    for r in _due(families, vector, values):
        if r.histograms is not None:
            out.update(r.histograms(values))
    return out


def _due(families: Sequence[Family], vector: str, values: Mapping[str, float]) -> list[Readout]:
    return [r for family in families for r in family.readouts
            if r.vector == vector and (not r.when or values.get(r.when, 0.0) > 0)]
