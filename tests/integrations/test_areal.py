"""AReaL 1.0.4's real ``PPOActor._compute_advantages`` (Normalization, KL, GAE) in its own venv."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from framework_venv import CASES, MARKER, REPO, quiet, run_cases, run_in_venv
from grpo_monitor.estimators import ESTIMATORS
from grpo_monitor.integrations import areal as gar

HEALTHY = {  # case -> (registry entry, stabilizer) the actor's config declares
    "grpo": ("areal.grpo", None),
    "grpo_scaled": ("areal.grpo", None),
    "grpo_overlong": ("areal.grpo", None),
    "dr_grpo": ("areal.dr_grpo", None),
    "group_bessel": ("bessel", 1e-5),
    "group_population": ("population", 1e-5),
    "group_mean": ("none", None),
    "group_leave_one_out": ("leave_one_out", None),
    "group_mean_batch_std": ("batch", None),
}


def _norm(mean="group", std="group", loo=False, unbiased=True, eps=1e-5, g=8):
    return NS(mean_level=mean, mean_leave1out=loo, std_level=std, std_unbiased=unbiased, eps=eps, group_size=g)


def _config(reward_norm, adv_norm=None, kl_ctl=0.0, discount=1.0, gae_lambda=1.0):
    return NS(reward_norm=reward_norm, adv_norm=adv_norm, kl_ctl=kl_ctl, discount=discount, gae_lambda=gae_lambda)


WHITEN = _norm("batch", "batch", g=1)


@pytest.mark.parametrize("config, expected", [
    (_config(_norm(), WHITEN), "areal.grpo"),
    (_config(_norm(std=None), WHITEN), "areal.dr_grpo"),
    (_config(_norm()), "bessel"),
    (_config(_norm(unbiased=False)), "population"),
    (_config(_norm(std=None)), "none"),
    (_config(_norm(std=None, loo=True)), "leave_one_out"),
    (_config(_norm(std="batch")), "batch"),
    (_config(_norm(), WHITEN, kl_ctl=0.1), "areal.grpo"),
    (_config(_norm(), WHITEN, discount=0.99), "areal.grpo"),
    (_config(_norm(loo=True)), None),
    (_config(_norm(unbiased=False), WHITEN), None),
    (_config(_norm(mean="batch", std="batch")), None),
    (_config(None, WHITEN), None),
], ids=["grpo", "dr_grpo", "bessel", "population", "none", "leave_one_out", "batch", "kl_ctl", "discount",
        "loo-with-std", "population-whitened", "batch-mean", "no-reward-norm"])
def test_declared_estimator(config, expected):
    """Each AReaL normalisation recipe names its registry entry, or none with the reason."""
    declared = gar.declared_estimator(config)
    assert declared.estimator == expected
    assert expected is None or expected in ESTIMATORS
    assert (expected is None) == bool(declared.note)


# ------------------------------------------------------------- the real package
@pytest.fixture(scope="module")
def cases():
    """Every case of framework_cases/areal_cases.py, run once in the AReaL venv."""
    return run_cases("areal")


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(HEALTHY))
def test_real_normalization_is_quiet_and_declared(case, cases):
    """AReaL's own advantages per recipe: quiet, the declared entry, its reference (token counts) within 1e-6."""
    result = cases[case]
    estimator, stabilizer = HEALTHY[case]
    assert result.get("raised") is None and result["violations"] == [], quiet(result)
    assert result["declared"] == result["convention"] == estimator and result["stabilizer"] == stabilizer
    assert result["group_size"] == 4 and result["metrics"]["grpo/groups/total"] == 4
    assert result["warnings"] == []
    if estimator == "batch":  # AReaL's batch std is the pooled within-group std: the same one scale, another value
        assert result["reference_scale_spread"] < 1e-6, quiet(result)
    else:
        assert result["reference_error"] < 1e-6, quiet(result)


@pytest.mark.slow
def test_kl_shaped_rewards_check_the_outcome_part(cases):
    """kl_ctl=0.1 shapes token rewards: the outcome part is checked against areal.grpo, quiet; KL and k3 observed."""
    result = cases["grpo_kl"]
    assert result["violations"] == [] and result["convention"] == "areal.grpo" and result["warnings"] == []
    assert "grpo/kl/user_mean" in result["metrics"] and "grpo/kl/k3_mean" in result["metrics"]


SHIPPED = {  # case -> the entry AReaL's default KL penalty (and discount) is checked against
    "default_grpo": "areal.grpo", "default_dr_grpo": "areal.dr_grpo", "default_group_bessel": "bessel",
    "default_group_mean_discounted": "none", "default_grpo_discounted": "areal.grpo",
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(SHIPPED))
def test_shipped_default_config_gets_its_advantages_checked(case, cases):
    """PPOActorConfig's own defaults (kl_ctl 0.1, read from areal/api/cli_args.py) with a GRPO normalisation, or a
    discount without a critic: the outcome part is checked (not skipped), quiet, within 1e-6 of the reference."""
    result = cases[case]
    assert result["defaults"]["kl_ctl"] == 0.1 and result["config"]["kl_ctl"] == 0.1
    assert result.get("raised") is None and result["violations"] == [] and result["warnings"] == [], quiet(result)
    assert result["declared"] == result["convention"] == SHIPPED[case]
    assert result["kl_share"] > 1e-3, "the KL (and discount) really moved the token advantages (1e4 x float32 noise)"
    if "reference_error" in result:
        assert result["reference_error"] < 1e-6, quiet(result)


@pytest.mark.slow
def test_a_learned_critic_stays_rewards_only_said_once(cases):
    """GAE with a critic's values in the batch: rewards and groups observed, advantages not, one warning why."""
    result = cases["default_critic"]
    assert result["violations"] == [] and result["convention"] is None
    assert len(result["warnings"]) == 1 and "learned critic" in result["warnings"][0]


@pytest.mark.slow
@pytest.mark.parametrize("case, invariant", [("default_broken_batch_std", "convention"),
                                             ("default_broken_misaligned", "affine_in_rewards")])
def test_a_defect_under_the_shipped_default_still_raises(case, invariant, cases):
    """Under the default KL penalty a batch std where group std is declared, or advantages one row off, raises."""
    result = cases[case]
    assert result["raised"] == "InvariantViolation", quiet(result)
    assert invariant in result["invariants"]


@pytest.mark.slow
@pytest.mark.parametrize("case, invariant", [("broken_batch_std", "convention"),
                                             ("broken_subclass", "zero_group_mean")])
def test_a_broken_normalisation_is_stopped(case, invariant, cases):
    """A batch std where the config says group std, or a subclass centring across groups, raises InvariantViolation."""
    result = cases[case]
    assert result["raised"] == "InvariantViolation", quiet(result)
    assert invariant in result["invariants"]


@pytest.mark.slow
def test_detach_restores_every_class(cases):
    """attach() wraps PPOActor and each loaded subclass overriding _compute_advantages; detach() restores them."""
    result = cases["detach_restores"]
    assert result["patched"] == ["PPOActor", "PromptAxisMean", "RolledAdvantages"] and result["restored"]


@pytest.mark.slow
def test_example_runs_in_seconds(tmp_path):
    """examples/areal_example.py: three quiet steps, the batch-std actor stopped, detached."""
    proc = run_in_venv("areal", REPO / "examples" / "areal_example.py", timeout=180, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "step 2: 4 groups, degenerate rate 0.25, estimator areal.grpo, violations 0" in proc.stdout
    assert "batch-std actor stopped: convention" in proc.stdout and "detached: True" in proc.stdout


# ------------------------------------------------------------- sinks="auto" follows AReaL's stats_logger
def test_tracker_settings_follow_areals_stats_logger_fields():
    """Trackers in StatsLogger's order (enabled modes, a TensorBoard path) and get_log_path's folder."""
    import getpass

    on, off = NS(mode="offline"), NS(mode="disabled")
    cfg = NS(wandb=off, swanlab=NS(mode="cloud"), trackio=NS(mode="local"), tensorboard=NS(path="/tb"),
             experiment_name="exp", trial_name="t1", fileroot="/runs")
    folder = f"/runs/logs/{getpass.getuser()}/exp/t1"
    assert gar.tracker_settings(cfg) == (("swanlab", "trackio", "tensorboard"), folder, "/tb")
    none = NS(wandb=on, swanlab=off, trackio=off, tensorboard=NS(path=None), experiment_name="???", trial_name="t",
              fileroot="/r")
    assert gar.tracker_settings(none) == (("wandb",), None, None)


@pytest.fixture(scope="module")
def tracker_cases(tmp_path_factory):
    """framework_cases/areal_tracker_cases.py run once in the AReaL venv, with its folder."""
    root = tmp_path_factory.mktemp("areal-trackers")
    proc = run_in_venv("areal", CASES / "areal_tracker_cases.py", str(root), timeout=300)
    found = [line[len(MARKER):] for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    assert proc.returncode == 0 and found, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(found[-1])


def _jsonl_steps(path: str) -> list[int]:
    return [json.loads(line)["step"] for line in Path(path).read_text().splitlines()]


@pytest.mark.slow
def test_auto_logs_into_the_runs_areal_opened(tracker_cases):
    """W&B (offline), Trackio (local) and TensorBoard in AReaL's config: grpo/ keys land next to AReaL's own key
    in AReaL's W&B run, its Trackio run and its TensorBoard folder (read back from each tracker's files)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = tracker_cases["wandb_trackio_tensorboard"]
    assert result.get("raised") is None, quiet(result)
    assert result["sinks"] == ["WandbSink", "TrackioSink", "TensorBoardSink"] and result["steps"] == [0, 1]
    assert result["warnings"] == [] and result["stderr"] == ""
    wandb_dir = Path(result["log_path"]) / "wandb"
    assert Path(result["wandb_file"]).is_relative_to(wandb_dir)
    assert len(list(wandb_dir.glob("offline-run-*"))) == 1  # AReaL's run, no second one
    for keys in (result["wandb_keys"], result["trackio_keys"]):
        assert {"areal/own", "grpo/groups/degenerate_rate", "grpo/step"} <= set(keys)
    assert result["trackio_runs"] == ["all3"]
    tb = Path(result["tensorboard_dir"])
    assert len(list(tb.glob("events.out.tfevents.*"))) == 2  # AReaL's file and the monitor's, neither overwritten
    acc = EventAccumulator(str(tb), size_guidance={"scalars": 0})
    acc.Reload()
    for tag in ("areal/own", "grpo/groups/degenerate_rate"):
        assert [e.step for e in acc.Scalars(tag)] == [0, 1]


@pytest.mark.slow
@pytest.mark.parametrize("case, warned", [("swanlab_only", True), ("trackers_disabled", False)])
def test_auto_falls_back_to_a_jsonl_log_in_areals_log_folder(tracker_cases, case, warned):
    """SwanLab only (no sink: named once in a warning) or every tracker disabled (AReaL's default, which leaves
    wandb's no-op run active): a JSONL log in StatsLogger.get_log_path()'s folder, its path printed."""
    result = tracker_cases[case]
    assert result.get("raised") is None, quiet(result)
    assert result["sinks"] == ["JSONLSink"] and result["steps"] == [0, 1]
    path = str(Path(result["log_path"]) / "grpo-monitor" / "monitor.jsonl")
    assert f"writing the monitor's log to {path}" in result["stderr"]
    assert _jsonl_steps(path) == [0, 1]
    if warned:
        (text,) = result["warnings"]
        assert "no sink for the tracker(s) ['swanlab']" in text
    else:
        assert result["warnings"] == [] and result["wandb_run"] == "NoopRun"
