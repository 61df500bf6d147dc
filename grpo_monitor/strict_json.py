"""Plain values for strict JSON (``json.dumps(..., allow_nan=False)``): the ``--json`` outputs of the CLI.

Torch-free, so a subcommand can use it without importing what it serializes.
"""

from __future__ import annotations

import math
from typing import Any


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None, tuples as lists (strict JSON).

    >>> json_safe({"ratio": float("nan"), "rows": (1.0, float("inf"))})
    {'ratio': None, 'rows': [1.0, None]}
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
