"""Every value a check consumes is validated at the boundary: a bad entry is the user's error, never a fault."""

from __future__ import annotations

import warnings

import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.catalog.metrics import DISABLED_PARTS_KEY as DISABLED
from grpo_monitor.step.inputs import InputValueError
from references import advantages

R = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.5, 1.0, 0.0]])
ADV = advantages(R, "population", 1e-6)
LENGTHS = torch.tensor([[3.0, 7.0, 4.0, 5.0], [1.0, 2.0, 3.0, 4.0], [9.0, 8.0, 7.0, 6.0]])
NAN, INF = float("nan"), float("inf")


def _with(t: torch.Tensor, index: tuple[int, ...], value: float) -> torch.Tensor:
    out = t.clone()
    out[index] = value
    return out


BAD = [
    pytest.param("areal.grpo", dict(lengths=_with(LENGTHS, (0, 1), NAN)), "lengths[0][1] is nan", id="lengths-nan"),
    pytest.param("areal.grpo", dict(lengths=_with(LENGTHS, (2, 3), INF)), "lengths[2][3] is inf", id="lengths-inf"),
    pytest.param("areal.grpo", dict(lengths=_with(LENGTHS, (1, 0), -2.0)), "lengths[1][0] is -2.0",
                 id="lengths-negative"),
    pytest.param("population", dict(lengths=_with(LENGTHS, (1, 2), NAN)), "lengths[1][2] is nan",
                 id="lengths-nan-unused-by-estimator"),
    pytest.param("population", dict(truncated=_with(torch.zeros(3, 4), (0, 2), NAN)), "truncated[0][2] is nan",
                 id="truncated-nan"),
    pytest.param("trl.normalize_then_sum",
                 dict(reward_components=torch.stack([R, _with(R, (1, 1), INF)], -1)),
                 "reward_components[1][1][1] is inf", id="components-inf"),
    pytest.param("trl.normalize_then_sum",
                 dict(reward_components=torch.stack([R, R], -1), reward_weights=torch.tensor([1.0, NAN])),
                 "reward_weights[1] is nan", id="weights-nan"),
]


@pytest.mark.parametrize(("estimator", "kwargs", "named"), BAD)
def test_bad_value_is_the_users_error_naming_argument_index_and_value(estimator, kwargs, named):
    """The error names the argument, the first bad index and its value; nothing is switched off."""
    mon = GRPOMonitor(MonitorConfig(std_convention=estimator, on_violation="warn"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no internal-fault warning either
        with pytest.raises(InputValueError, match=named.replace("[", r"\[").replace("]", r"\]")):
            mon.observe_rollout(R, advantages=ADV, **kwargs)
        assert mon.end_step().metrics[DISABLED] == 0.0


@pytest.mark.parametrize("bad", [NAN, INF, -1.0], ids=["nan", "inf", "negative"])
def test_sign_flip_after_bad_lengths_is_still_caught(bad):
    """Three steps of bad lengths raise to the user; a sign flip with good lengths next is caught, nothing off."""
    mon = GRPOMonitor(MonitorConfig(std_convention="areal.grpo", on_violation="warn"))
    for _ in range(3):
        with pytest.raises(InputValueError, match="lengths"):
            mon.observe_rollout(R, advantages=ADV, lengths=_with(LENGTHS, (0, 0), bad))
        mon.end_step()
    with pytest.warns(RuntimeWarning, match="affine_in_rewards"):
        mon.observe_rollout(R, advantages=-advantages(R, "population", 1e-6), lengths=LENGTHS)
        report = mon.end_step()
    assert report.metrics[DISABLED] == 0.0
    assert "affine_in_rewards" in {v.invariant for v in report.violations}


def test_generation_lengths_are_checked_too():
    """observe_generation's lengths feed the ledger's token totals: a NaN there is the user's error as well."""
    mon = GRPOMonitor(MonitorConfig(group_size=4))
    with pytest.raises(InputValueError, match=r"lengths\[2\]\[0\] is nan"):
        mon.observe_generation(R, lengths=_with(LENGTHS, (2, 0), NAN))


def test_good_values_pass_quietly():
    """Good lengths and bool truncation pass: no error, no violation."""
    mon = GRPOMonitor(MonitorConfig(std_convention="population", on_violation="raise"))
    mon.observe_rollout(R, advantages=ADV, lengths=LENGTHS,
                        truncated=torch.zeros(3, 4, dtype=torch.bool))
    assert mon.end_step().violations == []
