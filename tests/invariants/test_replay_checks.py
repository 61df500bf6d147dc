"""Replay checks: ``one_nonzero_per_group`` (pass@k) sits beside its record, runs only when the estimator promises
it, is quiet on verl's pass@k advantages and loud on the two real defects (every row credited, the wrong row)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig
from grpo_monitor.estimators import get
from grpo_monitor.estimators.rows import Rows
from grpo_monitor.invariants import INVARIANTS, estimator

B, G = 6, 8


def _batch(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Continuous rewards (B groups of G, one best row each) and verl's pass@k advantages for them (float64
    reference of compute_grpo_passk_outcome_advantage, checked against verl itself in tests/estimators)."""
    r = np.random.default_rng(seed).random((B, G))
    gid = np.repeat(np.arange(B), G)
    return r.reshape(-1), gid, get("verl.grpo_passk")(r.reshape(-1), gid)


def _credits_every_row(r: np.ndarray, gid: np.ndarray, a: np.ndarray) -> np.ndarray:
    """A pass@k that gives every row its group-normalised advantage (a plain z-score)."""
    return get("bessel")(r, gid)


def _credits_a_loser(r: np.ndarray, gid: np.ndarray, a: np.ndarray) -> np.ndarray:
    """The one nonzero advantage of group 2 moved onto its worst row (a wrong row index)."""
    out = a.copy()
    rows = np.flatnonzero(gid == 2)
    winner, loser = rows[np.argmax(r[rows])], rows[np.argmin(r[rows])]
    out[loser], out[winner] = out[winner], 0.0
    return out


def _rows(r: np.ndarray, gid: np.ndarray, a: np.ndarray) -> Rows:
    return Rows(r, gid, a, None, [f"q{i}" for i in range(B)])


def test_the_record_and_its_check_live_together():
    """The replay check is registered under its record's name, in the estimator module that holds the record."""
    assert set(estimator.REPLAY_CHECKS) <= {rec.name for rec in estimator.RECORDS}
    assert INVARIANTS["one_nonzero_per_group"].side == "replay"


def test_quiet_on_verl_pass_at_k():
    """verl's own pass@k advantages: one nonzero row per group, a best one; no violation."""
    r, gid, a = _batch()
    assert np.count_nonzero(a.reshape(B, G), axis=1).tolist() == [1] * B  # the reference is what we think
    assert estimator.one_nonzero_per_group(_rows(r, gid, a), MonitorConfig(), 3) == []


@pytest.mark.parametrize("defect, bad_groups", [(_credits_every_row, B), (_credits_a_loser, 1)],
                         ids=["every-row-credited", "a-losing-row-credited"])
def test_loud_on_the_defect(defect, bad_groups):
    """Each defect is one violation counting exactly the groups it breaks, labelled with their questions."""
    r, gid, a = _batch()
    found = estimator.one_nonzero_per_group(_rows(r, gid, defect(r, gid, a)), MonitorConfig(), 3)
    assert [(v.invariant, v.count, v.step) for v in found] == [("one_nonzero_per_group", bad_groups, 3)]
    if bad_groups == 1:
        assert found[0].groups == ("q2",)


def test_rows_are_copied_only_for_an_estimator_that_promises_it():
    """Without the promise the host rows are never fetched; with it they are, once."""
    r, gid, a = _batch()
    calls = []

    def rows():
        calls.append(1)
        return _rows(r, gid, _credits_every_row(r, gid, a))

    assert estimator.replay_violations({"zero_group_mean"}, rows, MonitorConfig(), 0) == [] and calls == []
    found = estimator.replay_violations({"one_nonzero_per_group"}, rows, MonitorConfig(), 0)
    assert [v.invariant for v in found] == ["one_nonzero_per_group"] and calls == [1]


@pytest.mark.parametrize("defect", [None, _credits_a_loser], ids=["verl-pass-at-k", "a-losing-row-credited"])
def test_through_the_monitor(defect, tmp_path):
    """Declared verl.grpo_passk: the real monitor is quiet on verl's advantages and raises on the defect."""
    r, gid, a = _batch(seed=1)
    a = defect(r, gid, a) if defect is not None else a
    mon = GRPOMonitor(MonitorConfig(group_size=G, std_convention="verl.grpo_passk", repro_dir=str(tmp_path)))
    if defect is None:
        mon.observe_rollout(torch.from_numpy(r), advantages=torch.from_numpy(a))
        assert mon.end_step().violations == []
        return
    with pytest.raises(InvariantViolation) as info:
        mon.observe_rollout(torch.from_numpy(r), advantages=torch.from_numpy(a))
        mon.end_step()
    assert "one_nonzero_per_group" in {v.invariant for v in info.value.violations}
