"""SkyRL's real ``ppo_utils.compute_advantages_and_returns`` (skyrl-train 0.3.1, skyrl 0.3.0) in its own venv."""

from __future__ import annotations

import json

import numpy as np
import pytest

from framework_venv import REPO, quiet, run_cases, run_in_venv
from grpo_monitor.estimators import ESTIMATORS
from grpo_monitor.integrations import skyrl as gsk

PACKAGES = ("skyrl_train", "skyrl")
HEALTHY = {  # case -> the registry entry the call declares
    **{f"{p}-grpo": "skyrl.grpo" for p in PACKAGES},
    **{f"{p}-grpo_no_std": "verl.grpo_no_std" for p in PACKAGES},
    **{f"{p}-rloo": "leave_one_out" for p in PACKAGES},
    "skyrl-grpo_epsilon": "skyrl.grpo",
    "skyrl-maxrl": "skyrl.maxrl",
    "skyrl-maxrl_epsilon": "skyrl.maxrl",
    **{f"{p}-reinforce++_unpadded": "skyrl.reinforce_plus_plus" for p in PACKAGES},
}


@pytest.mark.parametrize("estimator, norm, epsilon, expected", [
    ("grpo", True, None, ("skyrl.grpo", None)), ("grpo", True, 1e-6, ("skyrl.grpo", None)),
    ("grpo", True, 1e-3, ("skyrl.grpo", 1e-3)), ("grpo", False, None, ("verl.grpo_no_std", None)),
    ("rloo", True, None, ("leave_one_out", None)), ("maxrl", True, None, ("skyrl.maxrl", None)),
    ("maxrl", True, 1e-3, ("skyrl.maxrl", 1e-3)),
    ("reinforce++", True, None, ("skyrl.reinforce_plus_plus", None)), ("gae", True, None, (None, None)),
], ids=["grpo", "grpo-eps-default", "grpo-eps-1e-3", "grpo-no-std", "rloo", "maxrl", "maxrl-eps-1e-3", "reinforce++",
     "gae"])
def test_declared_estimator(estimator, norm, epsilon, expected):
    """Each dispatcher call names a registry entry (and a stabilizer when epsilon is not the default), or none."""
    declared = gsk.declared_estimator(estimator, norm, epsilon)
    assert (declared.estimator, declared.stabilizer) == expected
    assert declared.estimator is None or declared.estimator in ESTIMATORS
    assert (declared.estimator is None) == bool(declared.note)


def test_padding_rows_are_left_out():
    """Only SkyRL's DP padding (uid padN alone in its group) is dropped; a real group named pad0 is kept."""
    keep = gsk._real_rows(np.array(["a", "pad0", "a", "pad1", "pad2", "pad2"], dtype=object))
    assert keep.tolist() == [True, False, True, False, True, True]


# ------------------------------------------------------------- the real package
@pytest.fixture(scope="module")
def cases():
    """Every case of framework_cases/skyrl_cases.py, run once in the SkyRL venv."""
    return run_cases("skyrl")


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(HEALTHY))
def test_real_estimator_is_quiet_and_matches_its_registry_entry(case, cases):
    """SkyRL's own estimators on shuffled uid rows with a padding row: quiet, declared, the reference within 1e-6."""
    result = cases[case]
    assert result.get("raised") is None and result["violations"] == [], quiet(result)
    assert result["declared"] == result["convention"] == HEALTHY[case]
    assert result["metrics"]["grpo/groups/total"] == 4 and result["metrics"]["grpo/groups/degenerate_rate"] == 0.5
    assert result["reference_error"] < 1e-6, quiet(result)
    assert result["warnings"] == []


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["binary", "continuous", "graded"])
@pytest.mark.parametrize("package", PACKAGES)
def test_rloo_reference_matches_skyrl_on_every_batch_kind(package, kind, cases):
    """SkyRL's own compute_rloo_outcome_advantage, per token: skyrl.rloo within float32 resolution, one-row groups
    exactly 0, and verl.rloo (a one-row group keeps its reward) measurably off: the difference the entry records."""
    result = cases[f"{package}-rloo_direct-{kind}"]
    assert result.get("raised") is None, quiet(result)
    assert result["skyrl.rloo"] < 1e-6 and result["singleton_max"] == 0.0 and result["returns_are_advantages"]
    assert result["verl.rloo"] > 0.1


@pytest.mark.slow
def test_declared_epsilon_reaches_the_monitor(cases):
    """compute_advantages_and_returns(..., epsilon=1e-3) declares that stabilizer."""
    assert cases["skyrl-grpo_epsilon"]["stabilizer"] == 1e-3


SHIPPED = {"default_grpo": "skyrl.grpo", "default_grpo_kl_in_reward": "skyrl.grpo",
           "default_rloo_kl_in_reward": "leave_one_out"}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(SHIPPED))
def test_shipped_default_config_gets_its_advantages_checked(case, cases):
    """SkyRL's ppo_base_config.yaml (grpo, KL as a loss), and with use_kl_in_reward: the dispatcher called with its
    arguments is checked (not skipped) and quiet; the KL-shaped scores match the reference (float32 resolution of
    scores ~1 over the 1e-4 spread the KL gives constant-outcome groups: ~1e-3)."""
    result = cases[case]
    assert result["shipped"]["advantage_estimator"] == "grpo" and result["shipped"]["use_kl_in_reward"] is False
    assert result.get("raised") is None and result["violations"] == [] and result["warnings"] == [], quiet(result)
    assert result["declared"] == result["convention"] == SHIPPED[case]
    shaped = "kl_in_reward" in case
    assert (result["kl_in_rewards"] > 1e-5) == shaped, "the KL penalty really entered the scores"
    assert result["reference_error"] < (1e-3 if shaped else 1e-6), quiet(result)


@pytest.mark.slow
def test_gae_with_a_critic_stays_rewards_only_said_once(cases):
    """gae with a critic's values: rewards and groups observed, advantages not, one warning naming the critic."""
    result = cases["default_gae"]
    assert result["violations"] == [] and result["convention"] is None
    assert len(result["warnings"]) == 1 and "learned critic" in result["warnings"][0]


@pytest.mark.slow
def test_a_defect_under_the_shipped_default_still_raises(cases):
    """The default grpo returning advantages one row off their rewards raises out of the dispatcher."""
    result = cases["default_broken_rolled"]
    assert result["raised"] == "InvariantViolation", quiet(result)
    assert "zero_group_mean" in result["invariants"]


@pytest.mark.slow
@pytest.mark.parametrize("case, why", [("skyrl-reinforce++", "padding rows"), ("reinforce++_discounted", "gamma < 1")])
def test_reinforce_plus_plus_off_its_entry_observes_rewards_only(case, why, cases):
    """reinforce++ whitens the returns over the whole batch: with SkyRL's padding rows in it, or a discount, no
    entry holds the advantages: rewards only, one warning saying why."""
    result = cases[case]
    assert result["violations"] == [] and result["convention"] is None
    assert result["metrics"]["grpo/groups/total"] == 4
    assert len(result["warnings"]) == 1 and "'reinforce++'" in result["warnings"][0] and why in result["warnings"][0]


@pytest.mark.slow
def test_reinforce_plus_plus_rows_off_their_rewards_raise(cases):
    """SkyRL's real reinforce++ with its advantages one row off their rewards raises out of the dispatcher."""
    result = cases["reinforce++_broken"]
    assert result["raised"] == "InvariantViolation", quiet(result)
    assert {"convention", "affine_in_rewards"} & set(result["invariants"])


@pytest.mark.slow
@pytest.mark.parametrize("package", PACKAGES)
def test_a_registered_batch_std_grpo_is_stopped(package, cases):
    """A "grpo" registered in AdvantageEstimatorRegistry dividing by the batch std breaks the declared convention."""
    result = cases[f"{package}-broken_batch_std"]
    assert result["raised"] == "InvariantViolation", quiet(result)
    assert result["invariants"] == ["convention"] and "expected std_convention='skyrl.grpo'" in result["message"]


@pytest.mark.slow
def test_a_later_estimator_is_not_checked_against_the_first(cases):
    """The first call declares the monitor; a later rloo call is observed without advantages, with one warning."""
    result = cases["estimator_changes"]
    assert result["steps"] == 2 and result["declared"] == "skyrl.grpo" and result["violations"] == []
    assert len(result["warnings"]) == 1 and "'leave_one_out'" in result["warnings"][0]


@pytest.mark.slow
def test_detach_restores_both_packages(cases):
    """attach() wraps the dispatcher of skyrl-train and skyrl; detach() puts both back."""
    result = cases["detach_restores"]
    assert result["patched"] == ["skyrl.backends.skyrl_train.utils.ppo_utils", "skyrl_train.utils.ppo_utils"]
    assert result["wrapped"] and result["restored"]


@pytest.mark.slow
def test_example_runs_in_seconds(tmp_path):
    """examples/skyrl_example.py: three quiet steps, the custom batch-std grpo stopped, detached."""
    proc = run_in_venv("skyrl", REPO / "examples" / "skyrl_example.py", timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "step 2: 4 groups, degenerate rate 0.25, estimator skyrl.grpo, violations 0" in proc.stdout
    assert "custom grpo stopped: convention" in proc.stdout and "detached: True" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["healthy", "misaligned", "wrong_slice", "swapped_branch"])
def test_your_own_estimator_is_the_reference(variant, cases):
    """A user's estimator registered in SkyRL and declared as MonitorConfig(std_convention=fn): its own numbers
    are quiet; misaligned rows, a wrong group slice or a swapped branch of it stop the call."""
    result = cases[f"mine-{variant}"]
    if variant == "healthy":
        assert result.get("raised") is None and result["violations"] == [], quiet(result)
        assert result["convention"] == result["declared"] == "custom.my_estimator.reference"
    else:
        assert result["raised"] == "InvariantViolation", quiet(result)
        assert set(result["invariants"]) & {"convention", "affine_in_rewards", "zero_group_mean"}


@pytest.mark.slow
def test_the_setup_hook_imports_nothing_of_skyrl(tmp_path):
    """attach_from_env() (Ray's worker_process_setup_hook) imports neither SkyRL nor Ray: ppo_utils creates its
    registry actor on import, which a setup hook cannot do; the trainer's own import of the dispatcher binds
    the wrapper, and its first call logs step 0."""
    log = tmp_path / "hook.jsonl"
    proc = run_in_venv("skyrl", REPO / "tests/integrations/framework_cases/skyrl_hook_case.py", str(log), timeout=180)
    found = [line[len("GRPO_CASES "):] for line in proc.stdout.splitlines() if line.startswith("GRPO_CASES ")]
    assert proc.returncode == 0 and found, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(found[-1])
    assert result["returned"] == "None" and result["imported_by_hook"] == []
    assert result["bound_wrapper"] and result["attached"] and result["records"] == [0]
