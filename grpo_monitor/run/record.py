"""The run record: which integration fed the monitor, the trainer settings it reported, the monitor's config.

The monitor's first report (and the first after a re-declaration or a reopen) carries it as
``StepReport.run``; the JSONL line keeps it under ``"run"``, and the HTML report reads it to
word its "no data" notes for the trainer the run came from.

>>> run_record(("trl", {"beta": 0.0}), {"group_size": 8})
{'integration': 'trl', 'settings': {'beta': 0.0}, 'config': {'group_size': 8}}
"""

from __future__ import annotations

from typing import Any


def integration_arg(name: Any, settings: Any) -> tuple[str, dict[str, Any]]:
    """``declare_integration``'s arguments checked, the settings as JSON values (anything else as its str())."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty string (the integration), but got {name!r}")
    if settings is not None and not isinstance(settings, dict):
        raise TypeError(f"settings must be a dict of the trainer's settings or None, but got {type(settings).__name__}")
    plain = (bool, int, float, str)
    return name, {str(k): v if v is None or isinstance(v, plain) else str(v) for k, v in (settings or {}).items()}


def run_record(integration: tuple[str, dict[str, Any]] | None, config: dict[str, Any]) -> dict[str, Any]:
    """The record: the integration (``"api"``: the monitor's own calls) and its settings, then the config."""
    name, settings = integration or ("api", {})
    return {"integration": name, "settings": settings, "config": config}
