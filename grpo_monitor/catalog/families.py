"""Every metric family declared in one place (:class:`~grpo_monitor.catalog.family.Family`), in catalogue order.

``METRICS`` collects their records, ``step/metrics.py`` and ``stats/tokens/readout.py`` their
readouts (:func:`read_out`), the report their figures and a scan's trend table their rows.

>>> [f.name for f in FAMILIES]
['truncation', 'offpolicy', 'moe', 'entropy']
"""

from __future__ import annotations

from .family import Family, FigureSpec, read_histograms, read_out
from .family_entropy import ENTROPY
from .family_moe import MOE
from .family_offpolicy import OFFPOLICY
from .family_truncation import TRUNCATION

FAMILIES: tuple[Family, ...] = (TRUNCATION, OFFPOLICY, MOE, ENTROPY)
#: Every figure the families declare, in family order (the report places each after its ``after``).
DECLARED_FIGURES: tuple[FigureSpec, ...] = tuple(fig for f in FAMILIES for fig in f.figures)
#: Every row the families add to a scan's trend table: (label, key, format).
TREND_ROWS: tuple[tuple[str, str, str], ...] = tuple(row for f in FAMILIES for row in f.trends)

__all__ = ["DECLARED_FIGURES", "FAMILIES", "TREND_ROWS", "read_histograms", "read_out"]
