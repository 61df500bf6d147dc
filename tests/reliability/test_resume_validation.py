"""Resume is all-or-nothing and validated: a bad or foreign state is refused and leaves the monitor untouched."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.step.inputs import InputError
from references import advantages

G, GROUPS = 4, 6


def _config(**kw) -> MonitorConfig:
    return MonitorConfig(**{"on_violation": "ignore", "group_size": G, "std_convention": "population",
                            "history_cap": 50, **kw})


def _train(mon: GRPOMonitor, steps: range) -> list:
    out = []
    for step in steps:
        gen = torch.Generator().manual_seed(step)
        r = (torch.rand(GROUPS, G, generator=gen) < 0.5).double()
        questions = [f"q{(step * GROUPS + i) % 40}" for i in range(GROUPS)]
        mon.observe_generation(r, question_ids=questions)
        mon.observe_rollout(r, advantages=advantages(r, "population", 1e-6), question_ids=questions)
        out.append(mon.end_step())
    return out


@pytest.fixture(scope="module")
def saved() -> dict:
    mon = GRPOMonitor(_config())
    _train(mon, range(6))
    return mon.state_dict()


def _fingerprint(mon: GRPOMonitor) -> str:
    return json.dumps(mon.state_dict(), sort_keys=True, default=str)


def _broken(saved: dict, path: tuple, value) -> dict:
    state = copy.deepcopy(saved)
    node = state
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return state


BAD = [
    pytest.param(("step",), "abc", "step", id="step-string"),
    pytest.param(("step",), -3, "step", id="step-negative"),
    pytest.param(("step",), True, "step", id="step-bool"),
    pytest.param(("questions", "last_step"), "yesterday", "last_step", id="last_step-string"),
    pytest.param(("questions", "last_step"), 99, "last_step", id="last_step-after-step"),
    pytest.param(("totals", "generated_groups"), "many", "generated_groups", id="totals-string"),
    pytest.param(("totals", "generated_groups"), -5.0, "generated_groups", id="totals-negative"),
    pytest.param(("totals", "generated_groups"), math.inf, "generated_groups", id="totals-inf"),
    pytest.param(("totals", "surprise"), 1.0, "surprise", id="totals-unknown-key"),
    pytest.param(("counts", "finite"), "three", "finite", id="counts-string"),
    pytest.param(("counts", "no_such_invariant"), 1, "no_such_invariant", id="counts-unknown-invariant"),
    pytest.param(("questions", "questions", 0, 1), "seen", "times_seen", id="record-field-string"),
    pytest.param(("questions", "questions", 0, 4), -1, "response_count", id="record-field-negative"),
    pytest.param(("questions", "questions", 0), ["q0"], "question", id="record-too-short"),
    pytest.param(("questions", "questions"), "none", "questions", id="records-not-a-list"),
    pytest.param(("conventions", "candidates"), ["no_such_estimator"], "no_such_estimator", id="unknown-estimator"),
    pytest.param(("questions",), None, "questions", id="questions-missing"),
]


@pytest.mark.parametrize("path, value, named", BAD)
def test_a_bad_state_is_refused_naming_the_field_and_the_monitor_is_untouched(saved, path, value, named):
    """Every field is validated before anything changes: a worded InputValueError, the monitor as it was."""
    mon = GRPOMonitor(_config())
    _train(mon, range(2))
    before = _fingerprint(mon), mon.step
    with pytest.raises(InputError, match=named):
        mon.load_state_dict(_broken(saved, path, value))
    assert (_fingerprint(mon), mon.step) == before
    assert _train(mon, range(2, 3))[0].metrics["grpo/groups/total"] == GROUPS  # and still works


@pytest.mark.parametrize("other, word", [
    pytest.param(dict(group_size=8), "group_size", id="group-size"),
    pytest.param(dict(std_convention="bessel"), "estimator", id="estimator"),
])
def test_a_state_from_another_group_size_or_estimator_is_refused_unless_told(saved, other, word):
    """A foreign run's state is refused naming both values; allow_config_change=True loads it."""
    mon = GRPOMonitor(_config(**other))
    before = _fingerprint(mon)
    with pytest.raises(InputError, match=f"{word}.*allow_config_change=True"):
        mon.load_state_dict(saved)
    assert _fingerprint(mon) == before
    mon.load_state_dict(saved, allow_config_change=True)
    assert mon.step == saved["step"]


def test_an_undeclared_estimator_takes_the_saved_one_without_a_refusal(saved):
    """'auto' (nothing declared yet, as before an integration declares) is no conflict."""
    mon = GRPOMonitor(_config(std_convention="auto", group_size=None))
    mon.load_state_dict(saved)
    assert mon.step == saved["step"]


def test_the_new_configs_history_cap_wins(saved):
    """A saved history_cap never overrides the new config's: the history is cut to the new cap, newest kept."""
    assert len(saved["questions"]["questions"]) > 10
    mon = GRPOMonitor(_config(history_cap=10, stuck_after=2))
    mon.load_state_dict(saved)
    state = mon.state_dict()["questions"]
    assert state["cap"] == 10 and state["stuck_after"] == 2
    assert [q[0] for q in state["questions"]] == [q[0] for q in saved["questions"]["questions"][-10:]]
    _train(mon, range(6, 9))
    assert len(mon.state_dict()["questions"]["questions"]) == 10


def test_a_saved_state_round_trips_through_json_and_validation(saved, same):
    """The validated load takes what state_dict() gives, through JSON too, and continues identically."""
    a, b = GRPOMonitor(_config()), GRPOMonitor(_config())
    a.load_state_dict(saved)
    b.load_state_dict(json.loads(json.dumps(saved)))
    ra, rb = _train(a, range(6, 9)), _train(b, range(6, 9))
    assert same([r.metrics for r in ra], [r.metrics for r in rb])
    assert a.state_dict() == b.state_dict()
