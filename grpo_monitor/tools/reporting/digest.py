"""A run's JSONL log in a few lines of text: its steps and every violation as the monitor worded it.

The examples print this at the end of a run, so what they say is what the monitor
concluded, in its words and with its severity (a float32 residue the estimator explains is
a ``warning``, never called a breach).
"""

from __future__ import annotations

import os

from .facts import plural
from .numbers import plain
from .records import read_step_records


def log_digest(path: str | os.PathLike, limit: int = 10) -> list[str]:
    """``<severity>: <message>`` per violation (the first ``limit``), then a count line.

    The count line reads ``3 steps logged (1 to 3): 1 warning, no errors`` or
    ``... : no violations``; a step that stopped the run is named.
    """
    records = read_step_records(path)
    violations = [v for r in records for v in r.get("violations") or []]
    lines = [f"  {v.get('severity') or 'error'}: {plain(v.get('message') or v['invariant'])}"
             for v in violations[:limit]]
    if len(violations) > limit > 0:
        lines.append(f"  ... {len(violations) - limit} more in {path}")
    steps = sorted({int(r["step"]) for r in records})
    errors = sum((v.get("severity") or "error") == "error" for v in violations)
    warnings = len(violations) - errors
    counts = "no violations" if not violations else (f"{plural(errors, 'error') if errors else 'no errors'}, "
                                                     f"{plural(warnings, 'warning') if warnings else 'no warnings'}")
    where = f" ({steps[0]} to {steps[-1]})" if len(steps) > 1 else f" ({steps[0]})" if steps else ""
    stopped = next((int(r["step"]) for r in records if r.get("failed")), None)
    tail = f"; the error at step {stopped} stopped the run" if stopped is not None else ""
    lines.append(f"{plural(len(steps), 'step')} logged{where}: {counts}{tail}")
    return lines
