"""Every metric family declared in one place (:class:`~grpo_monitor.catalog.family.Family`).

``METRICS`` collects their records, ``step/metrics.py`` and ``stats/tokens/readout.py`` their
readouts (:func:`read_out`), the report their figures and a scan's trend table their rows, in
catalogue order (:data:`IN_ORDER`).

>>> [f.name for f in FAMILIES]
['offpolicy', 'entropy', 'moe', 'mismatch', 'truncation', 'weights']
>>> [f.name for f in IN_ORDER]
['mismatch', 'truncation', 'offpolicy', 'moe', 'entropy', 'weights']
"""

from __future__ import annotations

from .family import Family, FigureSpec, read_histograms, read_out
from .family_entropy import ENTROPY
from .family_mismatch import MISMATCH
from .family_moe import MOE
from .family_offpolicy import OFFPOLICY
from .family_truncation import TRUNCATION
from .family_weights import WEIGHTS

#: Every family, in the order they were declared (the off-policy family first).
FAMILIES: tuple[Family, ...] = (OFFPOLICY, ENTROPY, MOE, MISMATCH, TRUNCATION, WEIGHTS)
#: The families in catalogue order: the order their keys take within their sections (``docs/metrics.md``, the
#: dashboards), their readouts in a step's metrics, their figures' placing and their trend rows. The families
#: ported from hand-written records keep their keys' places of 0.3, before the off-policy family's.
IN_ORDER: tuple[Family, ...] = (MISMATCH, TRUNCATION, OFFPOLICY, MOE, ENTROPY, WEIGHTS)
if sorted(f.name for f in IN_ORDER) != sorted(f.name for f in FAMILIES):
    raise ValueError(f"IN_ORDER must hold every family once: {[f.name for f in IN_ORDER]} against "
                     f"{[f.name for f in FAMILIES]}")
#: Every figure the families declare, in catalogue order (the report places each after its ``after``).
DECLARED_FIGURES: tuple[FigureSpec, ...] = tuple(fig for f in IN_ORDER for fig in f.figures)
#: Every row the families add to a scan's trend table: (label, key, format).
TREND_ROWS: tuple[tuple[str, str, str], ...] = tuple(row for f in IN_ORDER for row in f.trends)

__all__ = ["DECLARED_FIGURES", "FAMILIES", "IN_ORDER", "TREND_ROWS", "read_histograms", "read_out"]
