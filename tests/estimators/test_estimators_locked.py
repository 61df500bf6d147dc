"""Under "auto", once an entry is locked each rollout replays it alone; the reports are those of the full replay."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.estimators import ESTIMATORS, judge

G, B, STEPS = 8, 16, 12


def _rollouts(first: str, then: str, switch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Binary rewards (B, G) and ``first``'s advantages (float32) before step ``switch``, ``then``'s from it."""
    rng = np.random.default_rng(0)
    gid = np.repeat(np.arange(B), G)
    out = []
    for step in range(STEPS):
        r = (rng.random((B, G)) < rng.random((B, 1))).astype(np.float64)
        a = ESTIMATORS[first if step < switch else then](r.reshape(-1), gid)
        out.append((torch.tensor(r, dtype=torch.float32), torch.tensor(a, dtype=torch.float32).reshape(B, G)))
    return out


def _run(rollouts) -> list[tuple[dict, list[tuple[str, str]]]]:
    """Each step's metrics and (invariant, observed) violations under "auto" with the warn policy."""
    mon = GRPOMonitor(MonitorConfig(group_size=G, std_convention="auto", on_violation="warn"))
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for r, a in rollouts:
            rep = mon.end_step() if mon.observe_rollout(r, advantages=a) is None else None
            assert rep is not None
            out.append((rep.metrics, [(v.invariant, v.observed) for v in rep.violations]))
    return out


@pytest.mark.parametrize(("first", "then", "switch"), [
    pytest.param("nemo_rl.grpo", "skyrl.maxrl", 5, id="loo-std-to-maxrl-at-5"),
    pytest.param("skyrl.maxrl", "nemo_rl.grpo", 9, id="maxrl-to-loo-std-at-9"),
    pytest.param("nemo_rl.grpo", "nemo_rl.grpo", STEPS, id="no-switch"),
])
def test_locked_judgement_equals_the_full_replay(monkeypatch, first, then, switch):
    """Every step's metrics and violations match a run that replays every candidate at every step
    (``NARROW_EVERY = 0``), and the switch is a ``convention`` error at exactly its step, naming both."""
    rollouts = _rollouts(first, then, switch)
    fast = _run(rollouts)
    monkeypatch.setattr(judge, "NARROW_EVERY", 0)
    full = _run(rollouts)
    assert fast == full
    flagged = [step for step, (_, found) in enumerate(fast) if any(inv == "convention" for inv, _ in found)]
    assert flagged == ([switch] if switch < STEPS else [])
    if switch < STEPS:
        text = next(obs for inv, obs in fast[switch][1] if inv == "convention")
        assert f"was {first}" in text and then in text


def test_a_locked_entry_is_judged_alone_between_full_replays(monkeypatch):
    """After the lock a step replays the locked entry alone; every NARROW_EVERY rollouts the candidates again."""
    alone: list[bool] = []
    real = judge.EstimatorJudge._locked_fits

    def spy(self, rows):
        alone.append(real(self, rows))
        return alone[-1]

    monkeypatch.setattr(judge.EstimatorJudge, "_locked_fits", spy)
    monkeypatch.setattr(judge, "NARROW_EVERY", 4)
    _run(_rollouts("nemo_rl.grpo", "nemo_rl.grpo", STEPS))
    assert alone == [False, True, True, True, True, False, True, True, True, True, False, True]
