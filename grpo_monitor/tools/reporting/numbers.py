"""One formatting rule for every number and sentence the report, ``scan`` and ``compare`` print.

- a count (a key whose catalogue unit counts things: groups, rows, tokens, ...) is an
  integer when it is one (``0``, not ``0.0``), and has one decimal when it is a mean over
  several steps;
- no ``-0``: a value that rounds to zero is written without its sign;
- ``n/a`` for a missing or non-finite value;
- a key whose value is constant by definition (``Metric.constant``, e.g. ``k2_neg_frac``)
  is left out of tables;
- markdown in prose: backticks become ``<code>`` on a page (:func:`html_prose`) and are
  dropped in a terminal (:func:`plain`).

>>> number(0.0, "{:.1f}", "grpo/sampling/stuck_questions"), number(2.5, "{:.1f}", "grpo/groups/total")
('0', '2.5')
>>> number(-0.0000001, "{:.4g}"), number(-1e-9, "{:.1%}"), number(float("nan"), "{:.3f}")
('-1e-07', '0.0%', 'n/a')
>>> plain("as `grpo-monitor demo` prints it")
'as grpo-monitor demo prints it'
"""

from __future__ import annotations

import html
import math
import re

#: Catalogue units that count things: their values are written as integers.
COUNT_UNITS = frozenset({"groups", "rows", "tokens", "questions", "responses", "violations", "calls", "parts"})


def _entry(key: str | None):
    if key is None:
        return None
    from ...catalog.metrics import METRICS

    return METRICS.get(key)


def is_count(key: str | None) -> bool:
    """Whether ``key``'s catalogue unit counts things (groups, rows, tokens, questions, ...)."""
    entry = _entry(key)
    return entry is not None and entry.unit in COUNT_UNITS


def constant_by_definition(key: str) -> bool:
    """Whether ``key`` takes one value at every step by definition (a table row of it says nothing)."""
    entry = _entry(key)
    return entry is not None and entry.constant is not None


def number(value: float | None, fmt: str = "{:.4g}", key: str | None = None) -> str:
    """``value`` written by the rule above: ``fmt`` (a ``str.format`` pattern), a count as an integer, no -0."""
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "n/a"
    if is_count(key):
        text = f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
    elif value == 0 and "e}" in fmt:
        text = "0"  # an exact 0 in scientific notation
    else:
        text = fmt.format(value)
    return text[1:] if text.startswith("-") and not re.search(r"[1-9]", text.split("e")[0]) else text


def plain(text: str) -> str:
    """``text`` for a terminal: markdown code marks (backticks) dropped."""
    return text.replace("`", "")


def html_prose(text: str) -> str:
    """``text`` escaped for a page, with markdown ``code`` spans rendered as ``<code>``."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unmatched backtick: no markup, just the text
        return html.escape(plain(text), quote=True)
    return "".join(f"<code>{html.escape(p, quote=True)}</code>" if i % 2 else html.escape(p, quote=True)
                   for i, p in enumerate(parts))


def plural(count: int, noun: str) -> str:
    """``1 step``, ``2 steps``.

    >>> plural(1, "step"), plural(3, "step")
    ('1 step', '3 steps')
    """
    return f"{count} {noun}" + ("" if count == 1 else "s")
