"""AReaL's per-token weight versions reach observe_rollout(policy_version=): the rows' ages through the real
``PPOActor._compute_advantages`` in AReaL's venv."""

from __future__ import annotations

import pytest

from test_framework_sampler import results


@pytest.mark.slow
def test_areal_versions_give_the_rows_ages():
    """Each row's version is its oldest generated token's; its age against the engine's version 7 is reported."""
    case = results("areal")["versions"]
    ages = [7 - h for h in case["heads"]]
    m = case["metrics"]
    assert m["grpo/offpolicy/age_mean"] == pytest.approx(sum(ages) / len(ages), rel=1e-12)
    assert m["grpo/offpolicy/age_max"] == max(ages) == 4
    assert m["grpo/offpolicy/age_frac_3plus"] == pytest.approx(sum(a >= 3 for a in ages) / len(ages), rel=1e-12)
