"""Dashboard layout shared by the TensorBoard and W&B sinks: which panel shows which key.

Pure data and functions (no backend imports), derived from the metric catalogue
(:data:`grpo_monitor.catalog.metrics.METRICS`): the sections, their order and each key's
section come from its entries, and keys whose entries name the same ``panel`` share one
chart (observed vs iid-predicted degenerate rate, the three KL estimators, ...). Every
other scalar gets a chart of its own; a key outside the catalogue (a new invariant, an
integration's own key) is placed by its prefix.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..catalog.metrics import METRICS, SECTIONS, STEP_KEY, section_of

__all__ = ["COMBINED_CHARTS", "KNOWN_KEYS", "SECTIONS", "STEP_KEY", "charts", "section_of"]

#: Every scalar key the monitor emits (per-invariant counts included), in display order.
KNOWN_KEYS: tuple[str, ...] = tuple(key for key, m in METRICS.items() if m.kind == "scalar")


def _combined() -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    panels: dict[tuple[str, str], list[str]] = {}
    for key in KNOWN_KEYS:
        m = METRICS[key]
        if m.panel is not None:
            panels.setdefault((m.section, m.panel), []).append(key)
    return tuple((section, title, tuple(keys)) for (section, title), keys in panels.items())


#: Charts that plot several keys together: (section, title, keys), from the entries' ``panel``.
COMBINED_CHARTS: tuple[tuple[str, str, tuple[str, ...]], ...] = _combined()
_PANEL_OF = {key: (section, title) for section, title, keys in COMBINED_CHARTS for key in keys}


def charts(keys: Iterable[str] = KNOWN_KEYS) -> dict[str, list[tuple[str, list[str]]]]:
    """Section -> [(chart title, keys)] for ``keys``, sections in display order.

    A combined chart holds those of its keys that are in ``keys`` and sits where its first
    one comes; every other sectioned key gets a chart titled by the key itself, in the
    order of ``keys``. Keys outside every section and empty sections are left out.

    >>> charts(["grpo/groups/degenerate_rate", "grpo/adv/stabilizer"])["Advantages"]
    [('grpo/adv/stabilizer', ['grpo/adv/stabilizer'])]
    >>> charts(["grpo/groups/degenerate_rate_iid", "grpo/groups/degenerate_rate"])["Groups"]
    [('degenerate rate: observed vs iid-predicted', ['grpo/groups/degenerate_rate', 'grpo/groups/degenerate_rate_iid'])]
    """
    wanted = {k: home for k in keys if (home := section_of(k)) is not None}  # key -> its section, in order
    out: dict[str, dict[str, list[str]]] = {name: {} for name, _ in SECTIONS}
    for key, home in wanted.items():
        section, title = _PANEL_OF.get(key, (home, key))
        out[section].setdefault(title, [])
    for section, title, members in COMBINED_CHARTS:
        if title in out[section]:
            out[section][title] = [k for k in members if k in wanted]
    for key, home in wanted.items():
        if key not in _PANEL_OF:
            out[home][key] = [key]
    return {name: list(panels.items()) for name, panels in out.items() if panels}
