"""The configuration's sections: every field of ``MonitorConfig`` in exactly one, by what it is about.

``MonitorConfig`` keeps its fields flat (``cfg.history_cap``, ``MonitorConfig(history_cap=...)``,
``model_dump()``: the form saved states, repro files, tracker parameters and
``GRPO_MONITOR_CONFIG`` hold) and reads them grouped too: ``cfg.history.history_cap``, or at
construction ``MonitorConfig(history={"history_cap": 500})``. ``tolerances`` is its own
section (a nested model, as it always was).

>>> from grpo_monitor import MonitorConfig
>>> cfg = MonitorConfig(sampler={"mismatch_mask": "token"}, history_cap=500)
>>> cfg.sampler.mismatch_mask, cfg.mismatch_mask, cfg.history.history_cap
('token', 'token', 500)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

#: Each section's fields, in the order the docs list them (``tolerances`` is a section of its own).
SECTIONS: dict[str, tuple[str, ...]] = {
    "advantages": ("group_size", "estimator", "stabilizer", "outcome_rewards", "rollout_scope"),
    "checks": ("on_violation", "policies", "defer_checks", "repro_dir", "strict"),
    "loss": ("loss_aggregation", "loss_scope", "loss_normalizer", "clip_range", "kl_clamp", "entropy_low_threshold"),
    "sampler": ("expect_on_policy", "on_policy_bitwise", "mismatch_ratio_low", "mismatch_ratio_high",
                "mismatch_mask", "max_policy_lag", "max_response_length"),
    "history": ("history_cap", "success_halflife", "stuck_after", "table_every", "table_rows"),
    "health": ("halt_on", "gpu_hour_cost", "entropy_floor"),
    "delivery": ("sink_queue_size", "sink_stall_timeout", "sink_when_full", "sink_flush_timeout"),
}
#: The section of each field.
SECTION_OF = {name: section for section, names in SECTIONS.items() for name in names}
#: Every section's name, ``tolerances`` included.
SECTION_NAMES = (*SECTIONS, "tolerances")


class Section(Mapping[str, Any]):
    """One section of a config, read-only: its fields as attributes (``cfg.sampler.mismatch_mask``) and as a
    mapping. Change a field on the config itself (``cfg.mismatch_mask = ...``)."""

    __slots__ = ("_name", "_values")

    def __init__(self, name: str, values: dict[str, Any]):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_values", values)

    def __getattr__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(f"config section {self._name!r} has no field {key!r}; its fields: "
                                 f"{', '.join(self._values)}") from None

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"config section {self._name!r} is read-only: set the field on the config "
                             f"(cfg.{key} = ...)")

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"{self._name}({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"


def flatten_sections(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with each section given as a mapping (``sampler={...}``) spread into flat fields.

    A field under the wrong section, or one given both ways with two values, is an error naming it.
    """
    out = {k: v for k, v in data.items() if k not in SECTIONS}
    for section in SECTIONS:
        if section not in data:
            continue
        values = data[section]
        if not isinstance(values, Mapping):
            raise ValueError(f"MonitorConfig({section}=) takes a mapping of its fields ({', '.join(SECTIONS[section])})"
                             f", got {type(values).__name__}")
        for key, value in values.items():
            _check_member(section, key)
            if key in out and out[key] != value:
                raise ValueError(f"MonitorConfig: {key} is given twice, as {key}={out[key]!r} and in "
                                 f"{section}= as {value!r}: pass one")
            out[key] = value
    return out


def _check_member(section: str, key: Any) -> None:
    if key in SECTIONS[section] or (key == "std_convention" and section == "advantages"):
        return
    home = SECTION_OF.get(key)
    where = (f"it belongs to section {home!r}" if home else "tolerances has its own section" if key == "tolerances"
             else f"no section has it (sections: {', '.join(SECTION_NAMES)})")
    raise ValueError(f"MonitorConfig({section}=) got an unknown field {key!r}; {where}; {section} holds "
                     f"{', '.join(SECTIONS[section])}")


def grouped(flat: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The flat fields of a config dump, nested by section (``tolerances`` as it is)."""
    out: dict[str, dict[str, Any]] = {s: {n: flat[n] for n in names if n in flat} for s, names in SECTIONS.items()}
    out["tolerances"] = dict(flat.get("tolerances") or {})
    return out
