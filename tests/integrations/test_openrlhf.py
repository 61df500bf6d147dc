"""OpenRLHF 0.11.2's real ``compute_advantages_and_returns`` in its own venv: every estimator, broken forks."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from framework_venv import REPO, quiet, run_cases, run_in_venv
from grpo_monitor.estimators import ESTIMATORS
from grpo_monitor.integrations import openrlhf as gor

HEALTHY = {  # case -> the registry entry OpenRLHF's args declare
    "group_norm": "openrlhf.group_norm",
    "rloo": "openrlhf.rloo",
    "dr_grpo": "openrlhf.dr_grpo",
    "reinforce_baseline": "openrlhf.reinforce_baseline",
    "group_norm_kl_in_reward": "openrlhf.group_norm",
    "dr_grpo_kl_in_reward": "openrlhf.dr_grpo",
}
UNCHECKED = {  # case -> what the one warning says
    "gae": "reads a learned critic's values",
    "flash_reinforce": "'flash_reinforce' is not group-relative",
}


def _args(estimator: str, n: int = 8, no_std_norm: bool = False) -> SimpleNamespace:
    advantage = SimpleNamespace(estimator=estimator, no_std_norm=no_std_norm)
    return SimpleNamespace(algo=SimpleNamespace(advantage=advantage), rollout=SimpleNamespace(n_samples_per_prompt=n))


@pytest.mark.parametrize("estimator", sorted(gor.ESTIMATORS))
def test_each_estimator_declares_a_registry_entry(estimator):
    """Every OpenRLHF estimator the integration maps names an entry of the registry, with the group size."""
    declared = gor.declared_estimator(_args(estimator))
    assert declared.estimator in ESTIMATORS and declared.estimator.startswith("openrlhf.")
    assert declared.group_size == 8


@pytest.mark.parametrize("estimator, kwargs", [("gae", {}), ("reinforce", {}), ("flash_reinforce", {}),
                                                ("reinforce_baseline", {"no_std_norm": True})],
                         ids=["gae", "reinforce", "flash_reinforce", "reinforce_baseline-no_std_norm"])
def test_options_without_an_entry_say_why(estimator, kwargs):
    """Options the registry does not reproduce declare no estimator and carry the reason."""
    declared = gor.declared_estimator(_args(estimator, **kwargs))
    assert declared.estimator is None and "registry entry" in declared.note


def test_stubs_never_replace_an_installed_module(monkeypatch):
    """stub_gpu_modules() stands in only for modules that are missing (here: numpy is installed, never stubbed)."""
    monkeypatch.setattr(gor, "GPU_MODULES", {"numpy": {}, "grpo_monitor_no_such_gpu_module": {"f": None}})
    try:
        assert gor.stub_gpu_modules() == ["grpo_monitor_no_such_gpu_module"]
        with pytest.raises(RuntimeError, match="stand-in"):
            sys.modules["grpo_monitor_no_such_gpu_module"].f()
    finally:
        sys.modules.pop("grpo_monitor_no_such_gpu_module", None)


# ------------------------------------------------------------- the real package
@pytest.fixture(scope="module")
def cases():
    """Every case of framework_cases/openrlhf_cases.py, run once in the OpenRLHF venv."""
    return run_cases("openrlhf")


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(HEALTHY))
def test_real_estimator_is_quiet_and_matches_its_registry_entry(case, cases):
    """OpenRLHF's own advantages on shuffled micro-batches: no breach, the declared entry, its reference within 1e-6."""
    result = cases[case]
    assert result.get("raised") is None and result["violations"] == [], quiet(result)
    assert result["declared"] == result["convention"] == HEALTHY[case]
    assert result["group_size"] == 4 and result["metrics"]["grpo/groups/total"] == 4
    assert result["metrics"]["grpo/groups/degenerate_rate"] == 0.5
    assert result["reference_error"] < 1e-6, quiet(result)
    assert result["warnings"] == []


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(UNCHECKED))
def test_options_without_an_entry_observe_rewards_only(case, cases):
    """gae (a learned critic), flash_reinforce: rewards and groups observed, advantages not, one warning why."""
    result = cases[case]
    assert result.get("raised") is None and result["violations"] == [], quiet(result)
    assert result["convention"] is None and result["metrics"]["grpo/groups/degenerate_rate"] == 0.5
    assert len(result["warnings"]) == 1 and UNCHECKED[case] in result["warnings"][0]


SHIPPED = {"default_group_norm": "openrlhf.group_norm", "default_rloo": "openrlhf.rloo",
           "default_dr_grpo": "openrlhf.dr_grpo", "default_reinforce_baseline": "openrlhf.reinforce_baseline",
           "reinforce_baseline_kl_in_reward": "openrlhf.reinforce_baseline"}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(SHIPPED))
def test_shipped_default_config_gets_its_advantages_checked(case, cases):
    """OpenRLHF's CLI defaults (KL in the reward, init_coef 0.01, read from cli/train_ppo_ray.py) with each group
    estimator: the outcome part is checked (not skipped) and quiet; the KL share is fully removed from every token
    (whitened reinforce_baseline included), and the group estimators match their reference within 1e-6."""
    result = cases[case]
    assert result.get("raised") is None and result["violations"] == [] and result["warnings"] == [], quiet(result)
    assert result["declared"] == result["convention"] == SHIPPED[case]
    if case.startswith("default_"):
        assert result["defaults"]["algo.kl.init_coef"] == 0.01 and result["defaults"]["algo.kl.use_loss"] is False
        assert result["token_spread"] < 1e-5 and result["kl_share"] > 100 * result["token_spread"], quiet(result)
        assert "reference_error" not in result or result["reference_error"] < 1e-6, quiet(result)


@pytest.mark.slow
def test_the_shipped_default_estimator_is_gae_with_a_critic_said_once(cases):
    """The CLI's default estimator, gae: rewards and groups observed, advantages not, one warning names the critic."""
    result = cases["default_gae"]
    assert result["defaults"]["algo.advantage.estimator"] == "gae"
    assert result["violations"] == [] and result["convention"] is None
    assert len(result["warnings"]) == 1 and "learned critic" in result["warnings"][0]


@pytest.mark.slow
@pytest.mark.parametrize("case, invariant", [("default_broken_population_std", "convention"),
                                             ("default_broken_rolled_reinforce_baseline", "affine_in_rewards"),
                                             ("default_broken_rolled_group_norm", "zero_group_mean")])
def test_a_defect_under_the_shipped_default_still_raises(case, invariant, cases):
    """Under the default KL-in-reward a population std, or advantages one row off their rewards, raises."""
    result = cases[case]
    assert result["raised"] == "InvariantViolation", quiet(result)
    assert invariant in result["invariants"]


@pytest.mark.slow
@pytest.mark.parametrize("case, invariant", [("broken_prompt_axis_std", "zero_group_mean"),
                                             ("broken_population_std", "convention")])
def test_a_broken_fork_is_stopped(case, invariant, cases):
    """A subclass taking the std over prompts, or the population std, raises InvariantViolation out of the call."""
    result = cases[case]
    assert result["raised"] == "InvariantViolation", quiet(result)
    assert invariant in result["invariants"] and f"invariant '{invariant}' broken" in result["message"]


@pytest.mark.slow
def test_subclasses_are_wrapped_and_observed_once_per_call(cases):
    """Every loaded subclass overriding the method is wrapped; one calling super() makes one step per call."""
    result = cases["outermost_only"]
    assert {"RemoteExperienceMaker", "Logged"} <= set(result["patched"])
    assert result["steps"] == 2 and result["violations"] == []


@pytest.mark.slow
def test_detach_restores_and_attach_twice_is_refused(cases):
    """detach() puts every original method back; a second attach() says to detach first; a given monitor stays open."""
    result = cases["detach_restores"]
    assert result["wrapped"] and result["restored"] and result["attached_after"] and result["monitor_open"]
    assert "already attached; call detach() first" in result["attach_twice"]


@pytest.mark.slow
def test_a_given_monitor_is_used_as_is(cases):
    """attach(monitor, step_per_call=False): the user's monitor and step boundaries; a mismatch warns once."""
    result = cases["user_monitor"]
    assert result["same"] and result["reports"] == 0 and result["violations"] == []
    assert result["convention"] == "bessel" and "config says 'openrlhf.group_norm'" in result["warnings"][0]


@pytest.mark.slow
def test_example_runs_in_seconds(tmp_path):
    """examples/openrlhf_example.py: three quiet steps, the broken fork stopped, detached."""
    proc = run_in_venv("openrlhf", REPO / "examples" / "openrlhf_example.py", timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "step 2: 4 groups, degenerate rate 0.25, estimator openrlhf.group_norm, violations 0" in proc.stdout
    assert "broken fork stopped: affine_in_rewards, zero_group_mean" in proc.stdout
    assert "detached: True" in proc.stdout
