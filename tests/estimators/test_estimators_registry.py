"""The registry: one record per estimator, complete and well-formed, with worded argument errors."""

from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest

from grpo_monitor.estimators import ESTIMATORS, PROMISES, SINGLETONS, STABILIZERS, by_framework, get, table

REQUIRED = {
    "population", "bessel", "none", "leave_one_out", "batch", "trl.group", "trl.batch", "trl.none",
    "trl.normalize_then_sum", "verl.grpo", "verl.grpo_vectorized", "verl.grpo_no_std", "verl.rloo",
    "verl.reinforce_plus_plus_baseline", "verl.gpg", "verl.grpo_passk", "nemo_rl.grpo", "nemo_rl.grpo_no_loo",
    "openrlhf.group_norm", "openrlhf.rloo", "openrlhf.reinforce_baseline", "openrlhf.dr_grpo", "areal.grpo",
    "roll.reward_norm", "skyrl.grpo", "skyrl.maxrl", "open_instruct.standard",
}
ESTS = list(ESTIMATORS.values())
IDS = [e.name for e in ESTS]


def test_every_named_estimator_is_registered():
    """The issue's list is covered; names are unique and dotted by framework."""
    assert set(ESTIMATORS) >= REQUIRED
    assert all(name == est.name for name, est in ESTIMATORS.items())
    groups = by_framework()
    assert set(groups) == {"generic", "trl", "verl", "nemo_rl", "openrlhf", "areal", "roll", "skyrl", "open_instruct"}
    assert sum(len(v) for v in groups.values()) == len(ESTIMATORS)


@pytest.mark.parametrize("est", ESTS, ids=IDS)
def test_record_is_well_formed(est):
    """Each record names its source (with a version for framework entries), its stabilizer mode and its promises."""
    assert est.description and est.source and est.promises <= set(PROMISES)
    assert est.singleton in SINGLETONS
    if est.framework != "generic":
        assert "@" in est.source and ".py" in est.source
    if "stabilizer" in est.params:
        assert est.params["stabilizer"] in STABILIZERS
    if est.fit_param:
        assert est.params[est.fit_param] >= 0


@pytest.mark.parametrize("est", ESTS, ids=IDS)
def test_reference_is_pure(est):
    """float64 (N,) out, inputs untouched, NaN rows 0, the same answer twice."""
    rng = np.random.default_rng(1)
    rewards = rng.normal(size=(12, 2) if est.multi_reward else 12)
    rewards[0] = np.nan
    gid, lengths = np.repeat(np.arange(3), 4), rng.integers(1, 9, 12).astype(float)
    before = rewards.copy()
    first = est(rewards, gid, lengths=lengths)
    assert first.dtype == np.float64 and first.shape == (12,) and first[0] == 0.0
    np.testing.assert_array_equal(rewards, before)
    np.testing.assert_array_equal(est(rewards, gid, lengths=lengths), first)


def test_get_names_the_closest_names():
    """An unknown name gets one line with the closest registry names (difflib)."""
    with pytest.raises(ValueError, match=r"^unknown estimator 'grpo'; did you mean '[a-z_.]*grpo'"):
        get("grpo")


@pytest.mark.parametrize("name,rewards,gid,kw,match", [
    ("bessel", np.zeros((4, 2)), np.zeros(4, int), {}, r"rewards has shape \(4, 2\) but estimator 'bessel' expects"),
    ("bessel", np.zeros(4), np.zeros(3, int), {}, "gid has shape"),
    ("bessel", np.zeros(4), np.zeros(4), {}, "expected integer group indices"),
    ("bessel", np.array([0.0, np.inf, 1.0, 0.0]), np.zeros(4, int), {}, "infinite values at rows"),
    ("bessel", np.zeros(4), np.zeros(4, int), {"epsilon": 1.0}, r"unknown parameter\(s\) \['epsilon'\]"),
    ("trl.normalize_then_sum", np.zeros(4), np.zeros(4, int), {}, r"expects \(N, K\)"),
    ("trl.normalize_then_sum", np.zeros((4, 2)), np.zeros(4, int), {"weights": (1.0,)}, "weights has 1 entries"),
    ("areal.grpo", np.zeros(4), np.zeros(4, int), {"lengths": np.ones(3)}, "lengths has shape"),
    ("areal.grpo", np.zeros(4), np.zeros(4, int), {"lengths": -np.ones(4)}, "lengths must be"),
])
def test_argument_errors_are_worded(name, rewards, gid, kw, match):
    with pytest.raises(ValueError, match=match):
        ESTIMATORS[name](rewards, gid, **kw)


def test_table_has_one_row_per_estimator():
    """The README table derives from the records."""
    rows = table()
    assert [r["name"] for r in rows] == list(ESTIMATORS)
    assert set(rows[0]) == {"id", "name", "formula", "params", "promises", "singleton", "source"}


@pytest.mark.parametrize("module", ["", ".families", ".registry", ".replay"])
def test_doctests(module):
    """The docstring examples run."""
    mod = importlib.import_module(f"grpo_monitor.estimators{module}")
    result = doctest.testmod(mod)
    assert result.failed == 0


def test_doc_cites_the_source():
    """Each record renders a docstring naming formula, defaults, promises, one-row rule and source."""
    doc = ESTIMATORS["verl.grpo"].doc
    assert "compute_grpo_outcome_advantage @ verl 0.9.1" in doc and "eps=1e-06" in doc and "verl's fallback" in doc
