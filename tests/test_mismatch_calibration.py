"""The mismatch invariant on a real tiny causal LM on CPU: quiet on real numerical noise, loud on real defects.

The lab (``tests/mismatch_lab.py``): a random 2-layer Llama with peaked distributions samples
with ``generate`` on bf16 weights (the sampler, KV cache, log-probs from its own scores) and
is scored by a float32 full forward (the trainer) while Adam trains it. Every step goes
through ``GRPOMonitor.observe_loss`` and ``end_step`` as a trainer's would. The figures these
tests rest on are in docs/mismatch.md (``benchmarks/mismatch_calibration.py``).
"""

from __future__ import annotations

import pytest
import torch

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig
from mismatch_lab import Lab

pytest.importorskip("transformers")


def observe(mon: GRPOMonitor, batch) -> object:
    mon.observe_loss(mask=batch.mask, sampler_logprobs=batch.sampler_logprobs, old_logprobs=batch.old_logprobs,
                     entropy=batch.entropy)
    return mon.end_step()


@pytest.fixture
def lab():
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    lab = Lab(seed=0)
    for _ in range(3):
        lab.step()
    yield lab
    torch.set_num_threads(threads)


def test_real_noise_for_a_few_steps_is_quiet(lab):
    """bf16 + KV-cache sampler against the float32 trainer: no violation of either severity."""
    mon = GRPOMonitor(MonitorConfig(strict=True))
    for _ in range(6):
        report = observe(mon, lab.step())
        assert report.violations == [], report.violations[0].message()
        assert 0 < report.metrics["grpo/mismatch/k3_mean"] < 0.02


@pytest.mark.slow  # 200 steps of generate: about a minute on one core
@pytest.mark.timeout(600)
def test_two_hundred_steps_of_real_noise_are_quiet(lab):
    """The Done-when run: 200 training steps, no mismatch violation of either severity."""
    mon = GRPOMonitor(MonitorConfig(strict=True))
    for _ in range(200):
        assert observe(mon, lab.step()).violations == []


@pytest.mark.parametrize("defect", ["stale_weights", "unsynced", "temperature", "shifted_tokens", "other_model",
                                    "shifted_mask"])
def test_each_defect_raises(lab, defect):
    """Sampler weights two optimizer steps stale or never synced, trainer at temperature 1 while sampling at 0.7,
    log-probs shifted by one token, another model's log-probs, the mask misaligned by one: InvariantViolation.
    (One step stale: the test below, at the steps where the documented rule says it is detectable.)"""
    mon = GRPOMonitor(MonitorConfig(strict=True))
    with pytest.raises(InvariantViolation) as info:
        observe(mon, lab.step(defect, lag=2))
    (v,) = info.value.violations
    assert v.invariant == "mismatch" and v.severity == "error"


def test_one_step_stale_sampler_raises_wherever_the_rule_says_it_is_detectable(lab):
    """Sampler weights one optimizer step stale, every step of a 60-step run: InvariantViolation (error) at every
    step where the policy moved by at least twice mismatch_k3 in that step (the documented rule: detectable once
    the lag's exact KL clears the threshold by the sampling error of k3 over the step's ~150 tokens). The exact
    lag KL is an independent float64 full-vocabulary reference from the two weight sets (``Lab.policy_kl``).
    Steps where the policy moved less than the threshold are below what a real engine's noise allows to flag:
    not asserted either way (docs/mismatch.md, "When a stale sampler is detectable")."""
    mon = GRPOMonitor(MonitorConfig(strict=True))
    threshold = mon.config.tolerances.mismatch_k3
    detectable = caught = 0
    for _ in range(60):
        batch = lab.step("stale_weights", lag=1)
        moved = lab.policy_kl(batch)
        try:
            observe(mon, batch)
            raised = False
        except InvariantViolation as exc:
            assert [(v.invariant, v.severity) for v in exc.violations] == [("mismatch", "error")]
            raised = True
            mon = GRPOMonitor(MonitorConfig(strict=True))  # a breach closes a strict monitor; the run goes on
        if moved >= 2 * threshold:
            detectable += 1
            assert raised, f"one step stale, policy moved {moved:.4f} nats (>= 2 x {threshold}) and nothing raised"
        caught += raised
    assert detectable >= 5, f"only {detectable} steps of 60 moved by >= 2 x mismatch_k3: the lab no longer trains"
    assert caught >= detectable


def test_lag_kl_reference_is_the_exact_kl(lab):
    """``Lab.policy_kl`` is 0 for a synced sampler (same weights) and the mean k3 of a stale one estimates it."""
    batch = lab.step()
    assert lab.policy_kl(batch) == 0.0
    ratios = []
    for _ in range(20):
        batch = lab.step("stale_weights", lag=1)
        k3 = float(torch.expm1(batch.old_logprobs - batch.sampler_logprobs).sub(batch.old_logprobs
                   - batch.sampler_logprobs)[batch.mask > 0].double().mean())
        ratios.append(k3 / lab.policy_kl(batch))
    assert 0.7 < sorted(ratios)[10] < 1.3  # median: k3 is an unbiased estimate of the exact KL (bf16 noise aside)


def test_top_p_with_renormalised_log_probs_is_at_least_a_warning(lab):
    """A top-p 0.9 sampler reporting log-probs renormalised over its nucleus: a mismatch warning."""
    mon = GRPOMonitor(MonitorConfig(strict=True))
    report = observe(mon, lab.step("top_p"))
    assert [(v.invariant, v.severity) for v in report.violations] == [("mismatch", "warning")]
    assert report.metrics["grpo/mismatch/ratio_mean"] < 0.99
