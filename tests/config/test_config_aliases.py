"""Every documented old name of the estimator (and of the two renamed tolerances) still works, warning once."""

from __future__ import annotations

import importlib
import json
import sys
import warnings

import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig, StepReport, Tolerances
from grpo_monitor.config import aliases
from grpo_monitor.estimators import ESTIMATOR_IDS
from grpo_monitor.sinks import JSONLSink
from grpo_monitor.sinks.base import run_params

G = 4
REWARDS = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)


def _bessel(rewards: torch.Tensor) -> torch.Tensor:
    """Bessel z-scores in float64, written here (the reference the monitor's id is read against)."""
    mean = rewards.mean(dim=1, keepdim=True)
    std = ((rewards - mean) ** 2).sum(dim=1, keepdim=True).div(G - 1).sqrt()
    return ((rewards - mean) / std).float()


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    """Each test starts as a new process would: no old name warned yet."""
    import grpo_monitor.report as report
    import grpo_monitor.tools.theory as theory

    monkeypatch.setattr(aliases, "_warned", set())
    monkeypatch.setattr(report, "_warned", [])
    monkeypatch.setattr(theory, "_warned", set())


def _deprecations(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, DeprecationWarning)]


def _twice(action):
    """``action`` run twice; the deprecation messages of each run."""
    out = []
    for _ in range(2):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            value = action()
        out.append(_deprecations(record))
    return value, out


@pytest.mark.parametrize("action, expected, old", [
    pytest.param(lambda: MonitorConfig(std_convention="bessel").estimator, "bessel", "MonitorConfig.std_convention",
                 id="std_convention-keyword"),
    pytest.param(lambda: MonitorConfig(estimator="verl.grpo").std_convention, "verl.grpo",
                 "MonitorConfig.std_convention", id="std_convention-attribute"),
    pytest.param(lambda: MonitorConfig(**json.loads('{"std_convention": "trl.group"}')).estimator, "trl.group",
                 "MonitorConfig.std_convention", id="std_convention-json"),
    pytest.param(lambda: StepReport(0, {}, convention="bessel").estimator, "bessel", "StepReport.convention",
                 id="report-convention-keyword"),
    pytest.param(lambda: Tolerances(convention=5e-3).stabilizer_spread, 5e-3, "Tolerances.convention",
                 id="tolerance-convention-keyword"),
    pytest.param(lambda: Tolerances(stabilizer_spread=5e-3).convention, 5e-3, "Tolerances.convention",
                 id="tolerance-convention-attribute"),
    pytest.param(lambda: MonitorConfig(tolerances={"loss_aggregation": 3e-5}).tolerances.loss_weight_rel, 3e-5,
                 "Tolerances.loss_aggregation", id="tolerance-loss_aggregation-keyword"),
    pytest.param(lambda: Tolerances(loss_weight_rel=3e-5).loss_aggregation, 3e-5, "Tolerances.loss_aggregation",
                 id="tolerance-loss_aggregation-attribute"),
])
def test_an_old_config_name_works_and_warns_once(action, expected, old):
    """The old name gives the new field's value; the first use warns naming both, the second is quiet."""
    value, (first, second) = _twice(action)
    assert value == expected
    assert len(first) == 1 and first[0].startswith(f"{old} is deprecated") and second == []


def test_the_new_names_are_quiet():
    """estimator=, stabilizer_spread and loss_weight_rel raise no deprecation."""
    def new_names():
        cfg = MonitorConfig(estimator="bessel", tolerances={"stabilizer_spread": 1e-3, "loss_weight_rel": 2e-5})
        return cfg.estimator, cfg.tolerances.stabilizer_spread, cfg.tolerances.loss_weight_rel, cfg.model_dump()

    value, (first, _) = _twice(new_names)
    assert value[:3] == ("bessel", 1e-3, 2e-5) and first == []
    assert "estimator" in value[3] and "std_convention" not in value[3]


def test_both_names_with_two_values_is_an_error_naming_both():
    """estimator= and std_convention= disagreeing is refused, never one silently winning."""
    with pytest.raises(ValueError, match=r"estimator='bessel' and std_convention='population' name two values"):
        MonitorConfig(estimator="bessel", std_convention="population")
    assert MonitorConfig(estimator="bessel", std_convention="bessel").estimator == "bessel"


def test_std_convention_counts_as_the_user_declaring_the_estimator():
    """An integration keeps a user's std_convention= like estimator= (model_fields_set holds estimator)."""
    assert "estimator" in MonitorConfig(std_convention="bessel").model_fields_set


def test_run_params_write_the_estimator_once():
    """The tracker parameters hold grpo_monitor/estimator, and no second copy under the old name."""
    params = run_params(MonitorConfig(group_size=8, std_convention="bessel"))
    assert params["grpo_monitor/estimator"] == "bessel"
    assert [k for k, v in params.items() if v == "bessel"] == ["grpo_monitor/estimator"]


def test_a_step_reports_the_estimator_under_both_names(tmp_path):
    """A real step: StepReport.estimator, the deprecated .convention (one warning), the new and old id keys
    (equal to the registry's id of the estimator that made the advantages) and both JSONL keys."""
    path = tmp_path / "run.jsonl"
    mon = GRPOMonitor(MonitorConfig(group_size=G), sinks=[JSONLSink(str(path))])
    mon.observe_rollout(REWARDS, advantages=_bessel(REWARDS))
    report = mon.end_step()
    mon.close()
    assert report.estimator == "bessel" and report.violations == []
    convention, (first, second) = _twice(lambda: report.convention)
    assert convention == "bessel" and len(first) == 1 and "StepReport.convention" in first[0] and second == []
    ids = report.metrics["grpo/adv/estimator_id"], report.metrics["grpo/adv/convention_id"]
    assert ids == (ESTIMATOR_IDS["bessel"], ESTIMATOR_IDS["bessel"])
    record = json.loads(path.read_text().splitlines()[0])
    assert record["estimator"] == record["convention"] == "bessel"
    report.convention = "population"  # the setter too (already warned in this "process")
    assert report.estimator == "population"


def test_the_catalog_lists_the_old_id_key_as_an_alias():
    """grpo/adv/convention_id stays catalogued, marked as the alias of grpo/adv/estimator_id, in docs/metrics.md."""
    from pathlib import Path

    from grpo_monitor.catalog.metrics import METRICS

    assert METRICS["grpo/adv/convention_id"].alias_of == "grpo/adv/estimator_id"
    assert METRICS["grpo/adv/estimator_id"].alias_of is None
    text = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    assert "| `grpo/adv/convention_id` (alias of `grpo/adv/estimator_id`) |" in text


def test_a_state_saved_under_the_old_name_loads_and_its_estimator_is_checked():
    """A state whose config says std_convention (before 0.4) resumes; another estimator is still refused."""
    saved = GRPOMonitor(MonitorConfig(group_size=G, estimator="bessel", on_violation="ignore"))
    saved.observe_rollout(REWARDS, advantages=_bessel(REWARDS))
    saved.end_step()
    state = saved.state_dict()
    assert state["config"]["estimator"] == "bessel"
    state["config"] = {("std_convention" if k == "estimator" else k): v for k, v in state["config"].items()}
    resumed = GRPOMonitor(MonitorConfig(group_size=G, estimator="bessel"))
    resumed.load_state_dict(state)
    assert resumed.step == saved.step
    with pytest.raises(ValueError, match="estimator='bessel' \\(this monitor: 'population'\\)"):
        GRPOMonitor(MonitorConfig(group_size=G, estimator="population")).load_state_dict(state)


def test_theory_estimator_and_estimators_are_aliases_of_the_gradient_names():
    """tools.theory.Estimator and ESTIMATORS, names before 0.4, are GradientEstimator and GRADIENT_ESTIMATORS."""
    import grpo_monitor.tools.theory as theory

    value, (first, second) = _twice(lambda: (theory.Estimator, theory.ESTIMATORS))
    assert value == (theory.GradientEstimator, theory.GRADIENT_ESTIMATORS)
    assert value[1] == ("true", "reinforce", "centered", "leave_one_out", "standardized")
    assert len(first) == 2 and all("deprecated" in m for m in first) and second == []


def test_stats_conventions_is_an_alias_of_stats_scale_fit():
    """Importing the module's old name warns and gives the same functions."""
    from grpo_monitor.stats import scale_fit

    sys.modules.pop("grpo_monitor.stats.conventions", None)
    with pytest.warns(DeprecationWarning, match="grpo_monitor.stats.conventions is deprecated"):
        old = importlib.import_module("grpo_monitor.stats.conventions")
    assert old.CONVENTIONS is scale_fit.CONVENTIONS and old.stabilizer_range is scale_fit.stabilizer_range
