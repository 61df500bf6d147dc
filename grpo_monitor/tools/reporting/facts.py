"""Statements about a run computed from its log: start against end, peaks, the run-level degenerate check.

Captions and the summary table compare the start of a run with its end the same way:
the mean over the first and over the last tenth of the steps from 10 steps on, the first
and the last step from 2 to 9 steps, and the one value of a 1-step run (no comparison).

>>> s = spans(3)
>>> s.first, s.last
('at the first step', 'at the last step')
>>> change(np.arange(3), "The degenerate rate", np.array([0.1, 0.5, 0.25]), "{:.0%}")
'The degenerate rate went from 10% at the first step to 25% at the last step'
>>> change(np.arange(3), "The degenerate rate", np.array([0.0, 0.5, 0.0]), "{:.0%}")
'The degenerate rate was 0% at the first step and at the last step, ranging from 0% to 50% over the run'
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from .data import RunData, declared_group_size
from .numbers import number, plural


@dataclasses.dataclass(frozen=True)
class Spans:
    """How the start of a run is compared with its end: ``size`` steps at each end, worded."""

    steps: int
    size: int
    start: str
    end: str
    preposition: str

    @property
    def single(self) -> bool:
        """A 1-step run: one value, nothing to compare."""
        return self.steps == 1

    @property
    def by_step(self) -> bool:
        """2 to 9 steps: the first and the last step are compared, not tenths."""
        return 1 < self.steps < 10

    @property
    def first(self) -> str:
        return f"{self.preposition} {self.start}"

    @property
    def last(self) -> str:
        return f"{self.preposition} {self.end}"


def spans(steps: int) -> Spans:
    """The comparison for a run of ``steps`` steps (a tenth from 10 steps on, else single steps)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1 (the run's logged steps) but got {steps}")
    if steps >= 10:
        return Spans(steps, steps // 10, "the first tenth of the run", "the last tenth", "in")
    return Spans(steps, 1, "the first step", "the last step", "at")


def ends(values: np.ndarray, span: Spans) -> tuple[float, float]:
    """Mean of the finite values in the first and in the last ``span.size`` steps (NaN when none)."""
    head, tail = values[:span.size], values[-span.size:]
    return _finite_mean(head), _finite_mean(tail)


def _finite_mean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else math.nan


def span_labels(steps: int, head: tuple[int, int], tail: tuple[int, int], dash: str = "\u2013") -> list[str]:
    """Column headers for the start and the end of a run of ``steps`` steps, worded as :func:`spans` words them.

    ``head`` and ``tail`` are the first and last step numbers of the first and the last span.
    The report, ``scan`` and ``compare`` all head their tables with these.

    >>> span_labels(1, (3, 3), (3, 3)), span_labels(3, (1, 1), (3, 3))
    (['step 3'], ['first step (1)', 'last step (3)'])
    >>> span_labels(20, (0, 1), (18, 19), dash="-")
    ['first tenth (steps 0-1)', 'last tenth (steps 18-19)']
    """
    span = spans(steps)
    if span.single:
        return [f"step {head[0]}"]
    if span.by_step:
        return [f"first step ({head[0]})", f"last step ({tail[-1]})"]

    def where(a: int, b: int) -> str:
        return f"step {a}" if a == b else f"steps {a}{dash}{b}"

    return [f"first tenth ({where(*head)})", f"last tenth ({where(*tail)})"]


def span_labels_of(steps: Sequence[int], dash: str = "\u2013") -> list[str]:
    """:func:`span_labels` for a run's full list of steps."""
    size = spans(len(steps)).size
    return span_labels(len(steps), (steps[0], steps[size - 1]), (steps[-size], steps[-1]), dash)


def change(steps: np.ndarray, label: str, values: np.ndarray | None, fmt: str,
           key: str | None = None) -> str | None:
    """``"<label> went from A <start> to B <end>"``; ``stayed at A`` only when every logged value reads A
    (equal ends around a move in between say ``was A <start> and <end>, ranging from L to H over the run``);
    ``was`` on a 1-step run.

    From 10 steps on, A and B are means over the first and last tenth; below, the values at
    the first and last step that logged the metric (named by number when that is not the
    run's first or last step). None when the series holds no finite value. ``key`` names the
    metric, for the formatting rule (:func:`.numbers.number`: a count is an integer).
    """
    if values is None or not np.isfinite(values).any():
        return None
    span = spans(len(steps))
    if span.single:
        return f"{label} was {_fmt(float(values[0]), fmt, key)}"
    if span.by_step:
        logged = np.flatnonzero(np.isfinite(values))
        i, j = int(logged[0]), int(logged[-1])
        if i == j:
            return f"{label} was {_fmt(float(values[i]), fmt, key)} at step {steps[i]}, the only step that logged it"
        first, last = float(values[i]), float(values[j])
        start = span.start if i == 0 else f"step {steps[i]}"
        end = span.end if j == len(steps) - 1 else f"step {steps[j]} (the last that logged it)"
    else:
        first, last = ends(values, span)
        start, end = span.start, span.end
        if not math.isfinite(first) or not math.isfinite(last):
            known, where, other = ((last, span.last, span.start) if math.isfinite(last)
                                   else (first, span.first, span.end))
            return f"{label} was {_fmt(known, fmt, key)} {where} (not logged in {other})"
    a, b = _fmt(first, fmt, key), _fmt(last, fmt, key)
    if a != b:
        return f"{label} went from {a} {span.preposition} {start} to {b} {span.preposition} {end}"
    finite = values[np.isfinite(values)]
    low, high = _fmt(float(finite.min()), fmt, key), _fmt(float(finite.max()), fmt, key)
    if low == high:
        return f"{label} stayed at {a} from {start} to {end}"
    return (f"{label} was {a} {span.preposition} {start} and {span.preposition} {end}, "
            f"ranging from {low} to {high} over the run")


def peak(run: RunData, label: str, values: np.ndarray | None, fmt: str) -> str | None:
    """``"<label> peaked at X at step s"``, ``"... was X at every step"``, or None without data."""
    if values is None or not np.isfinite(values).any():
        return None
    finite = np.where(np.isfinite(values), values, -np.inf)
    top = int(np.argmax(finite))
    low = float(np.nanmin(np.where(np.isfinite(values), values, np.nan)))
    text = _fmt(float(values[top]), fmt)
    if len(run.steps) == 1:
        return f"{label} was {text}"
    if _fmt(low, fmt) == text:
        return f"{label} was {text} at every logged step"
    return f"{label} peaked at {text} at step {int(run.steps[top])}"


def _fmt(value: float, fmt: str, key: str | None = None) -> str | None:
    """The formatting rule (:func:`.numbers.number`); None for NaN and infinities."""
    if not math.isfinite(value):
        return None
    return number(value, fmt, key)


def sentences(parts: Sequence[str | None]) -> str:
    """The non-empty parts as sentences: capital first letter, one full stop each."""
    out = [p if p.endswith(".") else p + "." for p in parts if p]
    return " ".join(s[0].upper() + s[1:] for s in out)


@dataclasses.dataclass(frozen=True)
class DegenerateCheck:
    """Degenerate groups over the run: observed count, expected count, z-score, and where the expectation comes from."""

    observed: float
    expected: float
    z: float
    steps: int
    generated: bool
    source: str

    def sentence(self) -> str:
        """``Degenerate groups over the run: 1029 observed vs 1009.2 expected, z = +0.88 (...)``, as the demo
        prints it."""
        which = "every generated group" if self.generated else "training batch"
        z = "n/a" if not math.isfinite(self.z) else _z(self.z)
        return (f"Degenerate groups over the run ({which}, {plural(self.steps, 'step')}): "
                f"{self.observed:.0f} observed vs {self.expected:.1f} expected, z = {z}; {self.source}.")

    def short(self) -> str:
        """The same counts in a caption:
        ``over the run, 1029 degenerate groups were observed vs 1009.2 expected (z = +0.88)``."""
        z = "n/a" if not math.isfinite(self.z) else _z(self.z)
        return (f"over the run, {self.observed:.0f} degenerate groups were observed vs {self.expected:.1f} "
                f"expected (z = {z})")


def _z(z: float) -> str:
    """A z-score with its sign, ``+0.00`` (never ``-0.00``) when it rounds to zero."""
    text = f"{z:+.2f}"
    return "+0.00" if text == "-0.00" else text


_DEMO_SOURCE = ("expected from p^G + (1-p)^G with the demo policy's success probabilities, "
                "as `grpo-monitor demo` prints it")
_IID_SOURCE = ("expected from the monitor's iid prediction (each question's pooled success rate p, p^G + (1-p)^G per "
               "group); z uses each step's binomial variance, an upper bound, so |z| is if anything understated")


def degenerate_check(run: RunData) -> DegenerateCheck | None:
    """The run-level observed-vs-expected count of degenerate groups, or None without a prediction.

    A demo run compares with its own policy's probabilities (``theory.jsonl``), exactly as
    the demo's closing summary does; any other run with the monitor's iid prediction.
    """
    generated = run.has("grpo/sampling/generated_degenerate_rate")
    rate_key, total_key, iid_key, p_key = (
        ("grpo/sampling/generated_degenerate_rate", "grpo/sampling/generated_groups",
         "grpo/sampling/degenerate_rate_iid", "generated_p") if generated else
        ("grpo/groups/degenerate_rate", "grpo/groups/total", "grpo/groups/degenerate_rate_iid", "trained_p"))
    rate, total = run.series(rate_key), run.series(total_key)
    if rate is None or total is None:
        return None
    counts = np.where(np.isfinite(rate) & (total > 0), np.round(np.nan_to_num(rate) * np.nan_to_num(total)), np.nan)
    return (_demo_check(run, counts, p_key, generated) or _iid_check(counts, total, run.series(iid_key), generated))


def exact_check(counts: list[float], ps: list[list[float]], G: int) -> tuple[float, float, float]:
    """(observed, expected, z) of degenerate groups given every group's success probability.

    Group ``i`` is degenerate with probability ``d = p^G + (1-p)^G``; the count is a sum of
    independent Bernoullis, so ``z = (observed - sum d) / sqrt(sum d (1-d))`` (the demo's
    closing summary prints the same three numbers).

    >>> exact_check([1.0], [[0.5, 0.5]], 2)
    (1.0, 1.0, 0.0)
    """
    d = np.array([p**G + (1 - p) ** G for step in ps for p in step], dtype=float)
    observed, expected, var = float(sum(counts)), float(d.sum()), float((d * (1 - d)).sum())
    return observed, expected, (observed - expected) / math.sqrt(var) if var > 0 else math.nan


def _demo_check(run: RunData, counts: np.ndarray, p_key: str, generated: bool) -> DegenerateCheck | None:
    groups = run.theory_groups.get(p_key)
    G = declared_group_size(run.meta.get("group_size"))
    if not groups or G is None:
        return None
    keep = [(i, ps) for i, ps in enumerate(groups) if ps is not None and math.isfinite(counts[i])]
    if not keep:
        return None
    observed, expected, z = exact_check([counts[i] for i, _ in keep], [ps for _, ps in keep], G)
    return DegenerateCheck(observed, expected, z, len(keep), generated, _DEMO_SOURCE)


def _iid_check(counts: np.ndarray, total: np.ndarray, iid: np.ndarray | None,
               generated: bool) -> DegenerateCheck | None:
    if iid is None:
        return None
    keep = np.isfinite(counts) & np.isfinite(iid)
    if not keep.any():
        return None
    n, d = total[keep], iid[keep]
    observed, expected, var = float(counts[keep].sum()), float((n * d).sum()), float((n * d * (1 - d)).sum())
    z = (observed - expected) / math.sqrt(var) if var > 0 else math.nan
    return DegenerateCheck(observed, expected, z, int(keep.sum()), generated, _IID_SOURCE)
