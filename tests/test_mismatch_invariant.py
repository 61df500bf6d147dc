"""The mismatch invariant and the re-scoped on_policy: noise is quiet, defects are graded by severity."""

from __future__ import annotations

import math

import pytest
import torch

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig


def tokens(seed: int = 0, B: int = 64, T: int = 50, noise: float = 0.01, bias: float = 0.0) -> dict:
    """Sampler log-probs and trainer log-probs = sampler + noise (+ a constant bias), ragged rows."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(T)[None] < torch.randint(5, T + 1, (B, 1), generator=g)).float()
    sampler = -torch.rand(B, T, generator=g) * 3
    old = sampler + noise * torch.randn(B, T, generator=g) + bias
    return dict(mask=mask, sampler_logprobs=sampler, old_logprobs=old)


def sampled(seed: int = 0, B: int = 64, T: int = 30, V: int = 20, shift: float = 1.0) -> dict:
    """Tokens drawn from a sampler policy, with the log-probs of the sampler and of a trainer policy whose
    logits differ by ``shift`` x N(0, 1): two real distributions, so E_sampler[rho] = 1 exactly."""
    g = torch.Generator().manual_seed(seed)
    sampler_logits = 3 * torch.randn(B, T, V, generator=g)
    trainer_logits = sampler_logits + shift * torch.randn(B, T, V, generator=g)
    ls, lt = torch.log_softmax(sampler_logits, -1), torch.log_softmax(trainer_logits, -1)
    tok = torch.multinomial(ls.exp().reshape(-1, V), 1, generator=g).reshape(B, T, 1)
    return dict(mask=torch.ones(B, T), sampler_logprobs=ls.gather(-1, tok)[..., 0],
                old_logprobs=lt.gather(-1, tok)[..., 0])


def run(config: MonitorConfig, **x) -> tuple[object, list]:
    mon = GRPOMonitor(config)
    mon.observe_loss(**x)
    report = mon.end_step()
    return report, report.violations


def test_numerical_noise_is_never_a_violation():
    """bf16-sized noise, with a rare 0.7-nat outlier (TRL #6789's trainer-vs-trainer max): no violation."""
    x = tokens(noise=0.02)
    x["old_logprobs"][3, 2] += 0.7
    report, found = run(MonitorConfig(strict=True), **x)
    assert found == []
    assert report.metrics["grpo/mismatch/abs_diff_max"] > 0.5


def test_a_mismatch_kl_far_above_noise_is_an_error_naming_rows_and_cause():
    """Another model's log-probs on some rows: InvariantViolation with the numbers, the worst rows, the causes."""
    x = tokens()
    x["old_logprobs"][7] -= 2.0  # row 7 scored by another model
    x["old_logprobs"][11] += 2.0  # k3(+2) = 4.39 > k3(-2) = 1.14
    with pytest.raises(InvariantViolation) as info:
        run(MonitorConfig(strict=True), **x)
    (v,) = info.value.violations
    assert v.invariant == "mismatch" and v.severity == "error"
    assert v.groups[0].startswith("micro-batch 0 row 11") and v.groups[1].startswith("micro-batch 0 row 7")
    msg = v.message()
    assert "mismatch KL k3" in msg and "not synced" in msg and "max_policy_lag" in msg


def test_a_declared_policy_lag_keeps_the_statistics_without_the_error():
    """A sampler whose policy lags (another real distribution): an error, unless max_policy_lag > 0 declares
    it (asynchronous trainers), which keeps the mismatch keys; its weights still average to 1."""
    x = sampled()
    with pytest.raises(InvariantViolation, match="mismatch"):
        run(MonitorConfig(strict=True), **x)
    report, found = run(MonitorConfig(strict=True, max_policy_lag=1), **x)
    assert found == [] and report.metrics["grpo/mismatch/k3_mean"] > 0.02
    assert abs(report.metrics["grpo/mismatch/ratio_mean_z"]) < 8


def test_weights_that_do_not_average_to_one_are_a_warning():
    """Sampler log-probs renormalised over a 0.9 nucleus (rho = 0.9 on every token): a warning, not a stop."""
    x = tokens(noise=0.005, bias=math.log(0.9))
    report, found = run(MonitorConfig(strict=True), **x)
    (v,) = found
    assert v.invariant == "mismatch" and v.severity == "warning" and "top-p" in v.hint
    assert report.metrics["grpo/mismatch/ratio_mean_z"] < -8
    assert report.metrics["grpo/mismatch/k3_mean"] < 0.02


def test_a_significant_but_tiny_weight_bias_is_quiet():
    """A 0.2% bias over 50k tokens is many standard errors away but below mismatch_ratio_bias: no warning."""
    x = tokens(B=1000, noise=0.002, bias=math.log(0.998))
    report, found = run(MonitorConfig(strict=True), **x)
    assert abs(report.metrics["grpo/mismatch/ratio_mean_z"]) > 8 and found == []


@pytest.mark.parametrize("bitwise, gap, raises", [(False, 0.5, False), (True, 0.5, True), (False, None, True)],
                         ids=["noise-with-an-outlier", "bitwise-mode", "stale-old-logprobs"])
def test_on_policy_compares_trainer_against_trainer_with_the_same_rule(bitwise, gap, raises):
    """expect_on_policy: a 0.5-nat outlier in trainer-vs-trainer noise passes unless bitwise is declared;
    old log-probs from other parameters (mean k3 far above noise) break it."""
    g = torch.Generator().manual_seed(1)
    mask, lp = torch.ones(64, 40), -torch.rand(64, 40, generator=g) * 3
    old = lp + 1e-4 * torch.randn(64, 40, generator=g)
    if gap is not None:
        old[0, 0] += gap
    else:
        old = old + 0.5 * torch.randn(64, 40, generator=g)
    mon = GRPOMonitor(MonitorConfig(strict=True, expect_on_policy=True, on_policy_bitwise=bitwise))
    mon.observe_loss(mask=mask, logprobs=lp, old_logprobs=old)
    if raises:
        with pytest.raises(InvariantViolation, match="on_policy"):
            mon.end_step()
    else:
        assert mon.end_step().violations == []
