"""The configuration's older names: each still works, with one ``DeprecationWarning`` per name and process.

``std_convention`` is ``estimator`` (its 0.1 name); the tolerances ``convention`` and
``loss_aggregation`` are ``stabilizer_spread`` and ``loss_weight_rel`` (a tolerance named like the
``loss_aggregation`` setting read as that setting). :func:`renamed` maps old keys to new ones in a
mapping of settings; :func:`upgrade` does the same silently, for the files the monitor wrote itself
under the old names (a saved state, a repro file).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

#: MonitorConfig's older field names -> the current ones.
CONFIG_ALIASES = {"std_convention": "estimator"}
#: Tolerances' older field names -> the current ones.
TOLERANCE_ALIASES = {"convention": "stabilizer_spread", "loss_aggregation": "loss_weight_rel"}

_warned: set[str] = set()


def warn_renamed(owner: str, old: str, new: str) -> None:
    """One ``DeprecationWarning`` per ``owner.old`` and process: the old name still works."""
    if f"{owner}.{old}" in _warned:
        return
    _warned.add(f"{owner}.{old}")
    warnings.warn(f"{owner}.{old} is deprecated: it is {owner}.{new} (same setting); the old name keeps working",
                  DeprecationWarning, stacklevel=4)


def renamed(owner: str, data: Mapping[str, Any], aliases: Mapping[str, str], *, warn: bool = True
            ) -> dict[str, Any]:
    """``data`` with each old key of ``aliases`` under its new name; both, and different, is an error."""
    out = dict(data)
    for old, new in aliases.items():
        if old not in out:
            continue
        value = out.pop(old)
        if new in out and out[new] != value:
            raise ValueError(f"{owner}: {new}={out[new]!r} and {old}={value!r} name two values of one setting "
                             f"({old} is the older name of {new}): pass one")
        out[new] = value
        if warn:
            warn_renamed(owner, old, new)
    return out


def upgrade(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config mapping the monitor itself saved (``model_dump``), its old names made current, silently."""
    out = renamed("MonitorConfig", config, CONFIG_ALIASES, warn=False)
    if isinstance(out.get("tolerances"), Mapping):
        out["tolerances"] = renamed("Tolerances", out["tolerances"], TOLERANCE_ALIASES, warn=False)
    return out
