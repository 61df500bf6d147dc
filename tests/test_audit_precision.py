"""`grpo-monitor audit` judges a function at its own precision and names saturation, never blaming either on rows.

Faithful reproductions run here (a float32 MaxRL, AReaL's reward clip); SkyRL's and AReaL's real shipped functions
in tests/integrations/test_audit_frameworks.py.
"""

from __future__ import annotations

import pytest
import torch

from grpo_monitor.tools.audit import audit


def maxrl32(r):
    """SkyRL's MaxRL (skyrl/backends/skyrl_train/utils/ppo_utils.py, maxrl): (r - mean_g) / (mean_g + eps),
    computed on float32 token rewards as SkyRL does, cast back."""
    x = r.float()
    m = x.mean(1, keepdim=True)
    return ((x - m) / (m + 1e-6)).to(r.dtype)


def population32(r):
    x = r.float()
    return ((x - x.mean(1, keepdim=True)) / (x.std(1, correction=0, keepdim=True) + 1e-6)).to(r.dtype)


def clipped(r):
    """AReaL's reward clip (areal/trainer/ppo/actor.py: clip((r + bias) * scaling, +-reward_clip=20)), then the
    group z-score: affine at unit scale, two-valued once the rewards pass 20."""
    x = r.float().clamp(-20.0, 20.0)
    return ((x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + 1e-5)).to(r.dtype)


def shuffled(r):
    """A real misalignment: each group's advantages rolled by one row."""
    return torch.roll(population32(r), 1, dims=1)


def clipped_and_shuffled(r):
    return torch.roll(clipped(r), 1, dims=1)


@pytest.mark.parametrize("fn", [maxrl32, population32], ids=["maxrl-float32", "population-float32"])
def test_float32_reduction_order_is_not_a_permutation_failure(fn):
    """Reordering a float32 sum moves the output by a few eps32: within the function's own precision."""
    result = audit(fn, 8)
    assert result.equivariant and result.batch_independent
    assert not [v for v in result.violations if v["invariant"] == "permutation_equivariance"]


def test_a_real_shuffle_is_still_a_permutation_failure():
    """Misaligned rows move the output by O(1): an error at any precision."""
    result = audit(shuffled, 8)
    assert result.verdict == "broken" and result.equivariant is False
    assert any(v["invariant"] == "permutation_equivariance" and v["severity"] == "error" for v in result.violations)


def test_reward_clip_saturation_is_named_not_blamed_on_rows():
    """The clip makes the x1e4 probe two-valued per group: its breaches are named saturation, never misalignment."""
    result = audit(clipped, 8)
    saturated = [v for v in result.violations if v["probe"] == "scale_up"]
    assert saturated and all(v["hint"].startswith("saturation") for v in saturated)
    assert not [v for v in result.violations if v["probe"] in ("binary", "continuous")]
    assert not [v for v in result.violations if "misaligned" in v["hint"]]
    assert any("scale_up probe" in n and "saturates" in n for n in result.notes)


def test_saturation_is_not_an_excuse_for_a_function_broken_at_unit_scale():
    """Clipped and misaligned: the unit-scale probes break, so nothing is called saturation."""
    result = audit(clipped_and_shuffled, 8)
    assert result.verdict == "broken"
    assert not [v for v in result.violations if v["hint"].startswith("saturation")]
