"""docs/config.md, written from the config model itself: every field under its section, with its default.

``python -m grpo_monitor.config.reference`` rewrites the file; ``tests/config/test_config_sections.py``
checks it is current.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from . import MonitorConfig
from .aliases import CONFIG_ALIASES, TOLERANCE_ALIASES
from .sections import SECTIONS
from .tolerances import Tolerances

_INTRO = """# Configuration reference

Generated from `grpo_monitor.MonitorConfig` by `python -m grpo_monitor.config.reference`; do not edit.

Every field belongs to one section. A field is given flat or inside its section, and read either way:

```python
cfg = MonitorConfig(group_size=8, estimator="verl.grpo", sampler={"mismatch_mask": "token"}, history_cap=500)
cfg.history_cap, cfg.history.history_cap, cfg.sampler.mismatch_mask   # 500, 500, 'token'
MonitorConfig(**cfg.grouped()) == MonitorConfig(**cfg.model_dump()) == cfg   # True
```

`model_dump()` stays flat (the form a saved `state_dict`, a repro file, the tracker parameters
`grpo_monitor/<field>` and `GRPO_MONITOR_CONFIG` hold, so files of earlier versions still load);
`grouped()` gives the nested form. A section is read-only: change a field on the config
(`cfg.history_cap = 100`, validated). An unknown field is one line naming the nearest field; a
field under the wrong section names the section it belongs to.

Older names still work, each with one `DeprecationWarning` per process: {aliases}.
"""


def _default(field: Any) -> str:
    if field.default_factory is not None:
        value: Any = field.default_factory()
        return "{}" if value == {} else type(value).__name__ + "()"
    return f"`{field.default!r}`"


def _rows(model: type[BaseModel], names: tuple[str, ...]) -> list[str]:
    rows = ["| field | default | meaning |", "| --- | --- | --- |"]
    for name in names:
        field = model.model_fields[name]
        meaning = " ".join((field.description or "").split()).replace("|", "\\|")
        rows.append(f"| `{name}` | {_default(field)} | {meaning} |")
    return rows


def reference() -> str:
    """The text of docs/config.md."""
    aliases = [f"`MonitorConfig.{old}` (`{new}`)" for old, new in CONFIG_ALIASES.items()]
    aliases += [f"`Tolerances.{old}` (`{new}`)" for old, new in TOLERANCE_ALIASES.items()]
    parts = [_INTRO.replace("{aliases}", ", ".join(aliases))]
    for section, names in SECTIONS.items():
        parts += [f"## `{section}`", "", *_rows(MonitorConfig, names), ""]
    parts += ["## `tolerances`", "", "Relative tolerances of the invariants (`MonitorConfig(tolerances={...})`).", "",
              *_rows(Tolerances, tuple(Tolerances.model_fields)), ""]
    return "\n".join(parts)


if __name__ == "__main__":  # pragma: no cover - the docs writer
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "docs" / "config.md"
    out.write_text(reference())
    print(f"wrote {out}")
