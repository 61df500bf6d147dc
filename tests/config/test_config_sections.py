"""grpo_monitor.config's sections: every field in one, given flat or nested, read either way, round-tripped."""

from __future__ import annotations

import json

import pytest

from grpo_monitor import MonitorConfig
from grpo_monitor.config import SECTIONS
from grpo_monitor.config.reference import reference
from grpo_monitor.integrations._from_env import settings_from_env

#: A value other than the default for every flat field, written by hand (the reference the sections are read against).
NON_DEFAULT = {
    "group_size": 6, "estimator": "bessel", "stabilizer": 1e-4, "outcome_rewards": False, "rollout_scope": "global",
    "on_violation": "warn", "policies": {"convention": "ignore"}, "defer_checks": True, "repro_dir": "/tmp/r",
    "strict": True,
    "loss_aggregation": "token_mean", "loss_scope": "step", "loss_normalizer": 512.0, "clip_range": (0.1, 0.3),
    "kl_clamp": None, "entropy_low_threshold": 0.02,
    "expect_on_policy": True, "on_policy_bitwise": True, "mismatch_ratio_low": 0.25, "mismatch_ratio_high": 4.0,
    "mismatch_mask": "sequence", "max_policy_lag": 2, "max_response_length": 64,
    "history_cap": 500, "success_halflife": None, "stuck_after": 3, "table_every": 5, "table_rows": 20,
    "halt_on": ("stalled",), "gpu_hour_cost": 2.5, "entropy_floor": 0.1,
    "sink_queue_size": 7, "sink_stall_timeout": 5.0, "sink_when_full": "block", "sink_flush_timeout": 3.0,
}
SECTION_OF = {name: section for section, names in SECTIONS.items() for name in names}


def test_every_field_is_in_exactly_one_section():
    """The sections partition the model's fields (tolerances is a section of its own)."""
    listed = [name for names in SECTIONS.values() for name in names]
    assert len(listed) == len(set(listed))
    assert set(listed) | {"tolerances"} == set(MonitorConfig.model_fields)
    assert set(NON_DEFAULT) == set(listed)  # the hand-written table covers every field too


@pytest.mark.parametrize("name", sorted(NON_DEFAULT), ids=str)
def test_a_field_given_flat_or_in_its_section_is_the_same_config(name):
    """MonitorConfig(field=v) == MonitorConfig(section={field: v}); read flat and through the section alike."""
    value, section = NON_DEFAULT[name], SECTION_OF[name]
    flat, nested = MonitorConfig(**{name: value}), MonitorConfig(**{section: {name: value}})
    assert flat == nested
    assert getattr(flat, name) == getattr(getattr(nested, section), name) == value
    assert getattr(flat, name) != MonitorConfig.model_fields[name].get_default(call_default_factory=True)


def test_a_whole_config_round_trips_flat_nested_and_through_json():
    """grouped(), model_dump() and the JSON text (GRPO_MONITOR_CONFIG's form) all give the config back."""
    cfg = MonitorConfig(**NON_DEFAULT, tolerances={"zero_group_mean": 2e-3})
    assert MonitorConfig(**cfg.grouped()) == cfg
    assert MonitorConfig(**cfg.model_dump()) == cfg
    assert MonitorConfig(**json.loads(json.dumps(cfg.grouped(mode="json")))) == cfg
    assert MonitorConfig(**json.loads(cfg.model_dump_json())) == cfg
    assert set(cfg.grouped()) == {*SECTIONS, "tolerances"}
    assert cfg.grouped()["history"] == {k: NON_DEFAULT[k] for k in SECTIONS["history"]}


def test_the_environment_config_takes_the_nested_form():
    """GRPO_MONITOR_CONFIG='{"sampler": {...}, "history_cap": ...}' is the same config as its flat form."""
    config, _ = settings_from_env({"GRPO_MONITOR_CONFIG": json.dumps(
        {"sampler": {"mismatch_mask": "token"}, "history_cap": 500, "sinks": []})})
    assert config == MonitorConfig(mismatch_mask="token", history_cap=500)


@pytest.mark.parametrize("kwargs, words", [
    pytest.param({"sampler": {"history_cap": 3}}, r"MonitorConfig\(sampler=\) got an unknown field 'history_cap'; "
                 r"it belongs to section 'history'; sampler holds expect_on_policy, ", id="wrong-section"),
    pytest.param({"loss": {"lossy": 1}}, r"'lossy'; no section has it \(sections: advantages, checks, loss, sampler, "
                 r"history, health, delivery, tolerances\)", id="no-section"),
    pytest.param({"history": 5}, r"MonitorConfig\(history=\) takes a mapping of its fields \(history_cap, ",
                 id="scalar"),
    pytest.param({"history_cap": 5, "history": {"history_cap": 6}}, r"history_cap is given twice, as history_cap=5 "
                 r"and in history= as 6: pass one", id="twice"),
])
def test_a_wrong_nested_field_is_one_worded_error(kwargs, words):
    """A field under the wrong section names its section; an unknown one lists the sections; no silent merge."""
    with pytest.raises(ValueError, match=words):
        MonitorConfig(**kwargs)


def test_a_section_is_a_read_only_view_and_the_config_stays_assignable():
    """cfg.sampler.x = ... is refused with a pointer; cfg.x = ... still validates; the view then reads it."""
    cfg = MonitorConfig()
    with pytest.raises(AttributeError, match=r"read-only: set the field on the config \(cfg.mismatch_mask = ...\)"):
        cfg.sampler.mismatch_mask = "token"
    with pytest.raises(AttributeError, match="section 'sampler' has no field 'history_cap'"):
        cfg.sampler.history_cap  # noqa: B018 - the read is the test
    cfg.history_cap = 100
    assert cfg.history.history_cap == 100 and dict(cfg.history)["history_cap"] == 100
    with pytest.raises(ValueError, match="history_cap"):
        cfg.history_cap = 0


def test_the_config_reference_in_docs_is_current():
    """docs/config.md is what grpo_monitor.config.reference writes (python -m grpo_monitor.config.reference)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text()
    assert text == reference()
    for section, names in SECTIONS.items():
        assert f"## `{section}`" in text and all(f"| `{n}` |" in text for n in names)
