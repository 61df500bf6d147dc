"""The sampler's side from OpenRLHF, SkyRL and AReaL's own tensors, through their real entry points in their venvs.

Each case script (``framework_cases/<name>_sampler_cases.py``) calls the framework's real
advantage step with grpo-monitor attached, on the framework's own batch structure carrying
an inference engine's log-probs (a bfloat16 path of the trainer's logits, tokens sampled from
it) and the trainer's, and prints what the monitor reported and the tensors it was fed. Here
every grpo/mismatch/*, grpo/entropy/sampled_nll_mean, truncation and split key is recomputed
from those tensors in float64 (``tests/sampler_references.py``); a sampler reporting its
log-probs shifted by one token must raise the mismatch invariant out of the entry point.
"""

from __future__ import annotations

import doctest
import functools
import importlib
import json

import numpy as np
import pytest

from framework_venv import CASES, MARKER, run_in_venv
from sampler_references import mismatch_reference, split_reference

FRAMEWORKS = ("openrlhf", "skyrl", "areal")
HEALTHY = {"openrlhf": "healthy", "skyrl": "healthy", "areal": "recompute"}
SHIFTED = {"openrlhf": "shifted_by_one", "skyrl": "shifted_by_one", "areal": "recompute_shifted_by_one"}
MISMATCH_KEYS = ("k1_mean", "k3_mean", "abs_diff_mean", "abs_diff_max", "abs_diff_p99", "ratio_mean", "ratio_min",
                 "ratio_max", "ratio_mean_z", "outside_frac", "seq_ratio_mean", "seq_ess", "mult_prob_error")


@functools.cache
def results(framework: str) -> dict:
    """Every case of the framework's sampler case script, run once per session in its venv."""
    proc = run_in_venv(framework, CASES / f"{framework}_sampler_cases.py")
    found = [line[len(MARKER):] for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    assert proc.returncode == 0 and found, f"{framework}_sampler_cases.py failed:\n{proc.stdout[-3000:]}\n" \
                                           f"{proc.stderr[-3000:]}"
    return json.loads(found[-1])


def _padded(blocks) -> np.ndarray:
    """Micro-batches of different widths (a list of (B_i, T_i) lists, or one (B, T) list) as one zero-padded array."""
    if blocks and isinstance(blocks[0][0], (int, float)):
        return np.asarray(blocks, dtype=np.float64)
    if not isinstance(blocks[0][0][0], (int, float)):
        raise AssertionError("expected (B, T) lists")
    width = max(len(b[0]) for b in blocks)
    return np.concatenate([np.pad(np.asarray(b, dtype=np.float64), ((0, 0), (0, width - len(b[0])))) for b in blocks])


def _tokens(fed: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if isinstance(fed["mask"][0][0], list):  # OpenRLHF: one entry per micro-batch
        return _padded(fed["mask"]), _padded(fed["sampler"]), _padded(fed["trainer"])
    return (np.asarray(fed["mask"], dtype=np.float64), np.asarray(fed["sampler"]), np.asarray(fed["trainer"]))


def _grouped(values, groups) -> np.ndarray:
    """Per-row values as (groups, G) in group order (every group has G rows here)."""
    keys = sorted(set(groups), key=str)
    return np.array([[v for v, g in zip(values, groups, strict=True) if g == k] for k in keys], dtype=np.float64)


def reference(fed: dict) -> dict[str, float]:
    """The float64 reference of every sampler-side key from what the monitor was fed."""
    mask, sampler, trainer = _tokens(fed)
    out = mismatch_reference(mask, sampler, logprobs=trainer)
    rewards = _grouped(fed["rewards"], fed["group"])
    truncated = _grouped([float(t) for t in fed["truncated"]], fed["group"]).astype(bool)
    out.update(split_reference(rewards, truncated))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_healthy_sampler_is_quiet_and_every_key_equals_float64(framework):
    """On bfloat16-path noise the new families appear, each equal to its float64 recomputation, with no violation."""
    case = results(framework)[HEALTHY[framework]]
    assert "raised" not in case, case
    assert case["violations"] == [], case["violations"]
    metrics, expected = case["metrics"], reference(case["fed"])
    assert {f"grpo/mismatch/{k}" for k in MISMATCH_KEYS} <= set(metrics)
    for key in ("grpo/entropy/sampled_nll_mean", "grpo/rows/truncated_rate", "grpo/groups/degenerate_truncated_rate",
                "grpo/groups/degenerate_low_rate", "grpo/groups/degenerate_high_rate"):
        assert key in metrics, key
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
    assert 0 < metrics["grpo/rows/truncated_rate"] < 1, "the batch has truncated and complete rows"
    assert metrics["grpo/mismatch/k3_mean"] < 1e-3, "bfloat16 noise is far below the error tolerance"


@pytest.mark.slow
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_log_probs_shifted_by_one_raise_mismatch_out_of_the_entry_point(framework):
    """Rollout log-probs shifted by one token raise InvariantViolation('mismatch') from the framework's own call."""
    case = results(framework)[SHIFTED[framework]]
    assert case.get("raised") == "InvariantViolation", case
    assert case["invariants"] == ["mismatch"]
    assert "mismatch KL k3" in case["message"] and "shifted by one" in case["message"]


@pytest.mark.slow
def test_openrlhf_another_models_log_probs_raise():
    """OpenRLHF experiences whose rollout log-probs come from another model raise the mismatch invariant."""
    case = results("openrlhf")["other_model"]
    assert case.get("raised") == "InvariantViolation" and case["invariants"] == ["mismatch"], case


@pytest.mark.slow
@pytest.mark.parametrize("framework, case", [("openrlhf", "without_rollout_logprobs"), ("skyrl", "dispatcher_alone"),
                                             ("areal", "without_recompute")])
def test_without_both_log_probs_no_mismatch_is_reported(framework, case):
    """Where the framework's batch lacks the sampler's or the trainer's log-probs, no mismatch key and no fault."""
    result = results(framework)[case]
    assert "raised" not in result, result
    assert result["violations"] == [] and result["warnings"] == []
    assert not any(k.startswith("grpo/mismatch/") for k in result["metrics"]), result["metrics"]
    assert "grpo/groups/degenerate_low_rate" in result["metrics"], "the split comes from the rewards alone"


@pytest.mark.slow
def test_skyrl_multi_turn_has_no_truncation_from_the_per_turn_limit():
    """SkyRL with max_turns > 1: max_generate_length limits each turn, so no row is called truncated by it."""
    case = results("skyrl")["multi_turn"]
    assert case["violations"] == [] and "grpo/rows/truncated_rate" not in case["metrics"]
    assert "grpo/mismatch/k3_mean" in case["metrics"]


@pytest.mark.slow
def test_skyrl_padding_rows_are_left_out():
    """The row SkyRL's pad_batch appends (loss_mask 0, uid pad0) is not among the tokens or rows observed."""
    case = results("skyrl")["healthy"]
    assert case["pad_size"] == 1 and len(case["fed"]["rewards"]) == 24
    assert case["metrics"]["grpo/rows/truncated_rate"] == pytest.approx(
        np.mean([float(t) for t in case["fed"]["truncated"]]))


@pytest.mark.slow
def test_areal_decoupled_loss_declares_the_lag_and_shows_stale_samplers_without_an_error():
    """AReaL's decoupled (asynchronous) loss declares max_policy_lag: a stale sampler is shown, not an error."""
    on_policy, decoupled = results("areal")["recompute"], results("areal")["decoupled"]
    assert on_policy["max_policy_lag"] == 0 and decoupled["max_policy_lag"] == 1
    stale = results("areal")["decoupled_stale_sampler"]
    assert "raised" not in stale and stale["violations"] == []
    assert stale["metrics"]["grpo/mismatch/k3_mean"] > 1.0, "the lag's mismatch is still reported"
    for key, value in reference(stale["fed"]).items():
        assert stale["metrics"][key] == pytest.approx(value, rel=1e-6, abs=1e-9), key


@pytest.mark.slow
def test_areal_user_monitor_without_the_lag_is_told_why_it_raises():
    """A user's monitor with max_policy_lag=0 under AReaL's decoupled loss: a warning naming the fix, then the error."""
    case = results("areal")["decoupled_with_a_strict_monitor"]
    assert case.get("raised") == "InvariantViolation" and case["invariants"] == ["mismatch"], case
    assert any("max_policy_lag=1" in w for w in case["warnings"]), case["warnings"]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_feeds_examples_run(framework):
    """The docstring examples of each integration's sampler-side functions hold (no framework needed)."""
    module = importlib.import_module(f"grpo_monitor.integrations.{framework}")
    assert doctest.testmod(module).failed == 0
