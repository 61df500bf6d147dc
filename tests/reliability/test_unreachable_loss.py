"""A loss= not computed from the logprobs= given is a worded warning once, never all-zero weights."""

from __future__ import annotations

import warnings

import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from references import advantages

R = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
ADV = advantages(R, "population", 1e-6).reshape(-1)
MASK = torch.ones(8, 5)
MASK[::2, 3:] = 0  # unequal lengths: a row mean and a token mean differ, so all-zero weights would be loud


def _token_mean(lp: torch.Tensor) -> torch.Tensor:
    return -(ADV[:, None] * lp.float() * MASK).sum() / MASK.sum()


def _float_copy(gen):
    """bf16 log-probs the loss used; the monitor is handed a .float() copy."""
    lp = torch.randn(8, 5, generator=gen).to(torch.bfloat16).requires_grad_()
    return _token_mean(lp), lp.float()


def _other_forward(gen):
    """The loss from one forward pass, log-probs from another."""
    x = torch.randn(8, 5, generator=gen, requires_grad=True)
    return _token_mean(x * 1.0), x * 1.0


def _other_micro_batch(gen):
    """The previous micro-batch's loss with this micro-batch's log-probs."""
    first = torch.randn(8, 5, generator=gen, requires_grad=True)
    second = torch.randn(8, 5, generator=gen, requires_grad=True)
    return _token_mean(first), second


def _right(gen):
    lp = torch.randn(8, 5, generator=gen, requires_grad=True)
    return _token_mean(lp), lp


WRONG = [pytest.param(_float_copy, id="float-copy-of-bf16"), pytest.param(_other_forward, id="another-forward"),
         pytest.param(_other_micro_batch, id="another-micro-batch")]


def _run(make, aggregation: str, steps: int = 3):
    mon = GRPOMonitor(MonitorConfig(group_size=4, loss_aggregation=aggregation, on_violation="raise"))
    gen = torch.Generator().manual_seed(0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        reports = []
        for _ in range(steps):
            mon.observe_rollout(R, advantages=ADV.reshape(2, 4))
            loss, lp = make(gen)
            mon.observe_loss(mask=MASK, advantages=ADV, logprobs=lp, loss=loss)
            reports.append(mon.end_step())
    return reports, [str(w.message) for w in seen if "loss weights not measured" in str(w.message)]


@pytest.mark.parametrize("make", WRONG)
def test_declared_aggregation_falls_back_to_derived_weights_with_one_warning(make):
    """token_mean declared: no false loss_aggregation breach, one warning naming the cause, derived weights."""
    reports, said = _run(make, "token_mean")
    assert all(r.violations == [] for r in reports)
    assert len(said) == 1 and "not computed from the logprobs= given" in said[0]
    assert all(r.metrics["grpo/weights/measured"] == 0.0 for r in reports)
    assert all("grpo/weights/effective_responses" in r.metrics for r in reports)


@pytest.mark.parametrize("make", WRONG)
def test_auto_says_which_keys_are_left_out(make):
    """Under "auto" the weight keys that need weights are absent, and one warning says so and why."""
    reports, said = _run(make, "auto")
    assert len(said) == 1 and "not computed from the logprobs= given" in said[0] and "left out" in said[0]
    assert all("grpo/weights/effective_responses" not in r.metrics for r in reports)


@pytest.mark.parametrize("aggregation", ["token_mean", "auto"])
def test_loss_from_the_logprobs_given_is_measured_quietly(aggregation):
    """The correct call: weights measured on every row, no warning, no breach."""
    reports, said = _run(_right, aggregation)
    assert said == [] and all(r.violations == [] for r in reports)
    assert all(r.metrics["grpo/weights/measured"] == 1.0 for r in reports)
