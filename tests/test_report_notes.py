"""The run record and the report's per-integration "no data" notes: what the log carries, what each note names."""

from __future__ import annotations

import json

import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.catalog.metrics import METRICS
from grpo_monitor.sinks import JSONLSink
from grpo_monitor.tools.reporting import FIGURES, load_run
from grpo_monitor.tools.reporting.notes import INTEGRATIONS, NO_DATA, NOT_OBSERVED, advice


def _steps(monitor: GRPOMonitor, n: int) -> None:
    r = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    for _ in range(n):
        monitor.observe_rollout(r, advantages=torch.tensor([[1.0, -1.0], [0.0, 0.0]]))
        monitor.end_step()


def test_the_first_report_carries_the_run_record(tmp_path):
    """The first JSONL line holds integration, settings and config; later ones none until the integration is
    declared again; the report reads the latest."""
    log = tmp_path / "monitor.jsonl"
    monitor = GRPOMonitor(MonitorConfig(group_size=2), sinks=[JSONLSink(log)])
    _steps(monitor, 2)
    monitor.declare_integration("trl", {"beta": 0.0, "num_iterations": 1, "odd": object()})
    _steps(monitor, 1)
    monitor.close()
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [("run" in x) for x in lines] == [True, False, True]
    assert lines[0]["run"]["integration"] == "api" and lines[0]["run"]["config"]["group_size"] == 2
    assert lines[2]["run"]["settings"]["beta"] == 0.0 and isinstance(lines[2]["run"]["settings"]["odd"], str)
    run = load_run(log)
    assert run.integration == "trl" and run.settings["num_iterations"] == 1


@pytest.mark.parametrize("name,settings", [("", None), (3, None), ("trl", [("beta", 0)])],
                         ids=["empty-name", "not-a-string", "settings-not-a-dict"])
def test_declare_integration_refuses_bad_arguments(name, settings):
    """A wrong argument is a TypeError naming it."""
    with pytest.raises(TypeError, match="name must|settings must"):
        GRPOMonitor().declare_integration(name, settings)


def test_a_log_without_run_record_is_placed_by_its_estimator(tmp_path):
    """An older log (no run record) declaring trl.group is a TRL run; a plain one is the plain API."""
    log = tmp_path / "monitor.jsonl"
    log.write_text(json.dumps({"step": 0, "metrics": {"grpo/groups/total": 2.0}, "convention": "trl.group"}) + "\n")
    assert load_run(log).integration == "trl"
    log.write_text(json.dumps({"step": 0, "metrics": {"grpo/groups/total": 2.0}}) + "\n")
    assert load_run(log).integration == "api"


def test_every_row_names_a_known_integration_and_a_catalogued_family():
    """A row of the table is keyed by an integration the notes know and a prefix of at least one catalogued key,
    so a renamed key or family cannot leave a row behind."""
    for family, integration in NO_DATA:
        assert integration in INTEGRATIONS, (family, integration)
        assert any(key.startswith(family) for key in METRICS), (family, integration)


@pytest.mark.parametrize("integration", sorted(INTEGRATIONS))
def test_every_figure_gets_a_note_for_every_integration(integration):
    """Each figure's note is a sentence for every integration; only the plain API's point to the observe calls."""
    for spec in (s for s in FIGURES if s.name != "violations"):  # violations: no note, the table says "none"
        text = advice(spec.keys[0], integration, {})
        assert text and "{" not in text and "None" not in text, (spec.name, integration, text)
        if integration == "api":
            assert text.startswith("logged when you call observe_"), (spec.name, text)


@pytest.mark.parametrize("integration", sorted(INTEGRATIONS))
def test_caption_asides_follow_the_integration(integration):
    """What a drawn figure's caption says is missing (the iid prediction, the truncation line) is worded for the
    run's integration: the plain API's observe_rollout only for the plain API."""
    for key in ("grpo/groups/degenerate_rate_iid", "grpo/rows/truncated_rate", "grpo/groups/overdispersion"):
        text = advice(key, integration, {})
        assert text and "{" not in text and "None" not in text, (key, integration, text)
        assert ("observe_rollout" in text) == (integration == "api"), (key, integration, text)


def test_a_trl_logs_degenerate_caption_names_trl(tmp_path):
    """A log declared by the TRL integration, with no iid prediction: its degenerate caption speaks of TRL's reward
    functions, not of observe_rollout."""
    from grpo_monitor.tools.reporting import build_report
    from test_report_captions import captions

    log = tmp_path / "monitor.jsonl"
    monitor = GRPOMonitor(MonitorConfig(group_size=2), sinks=[JSONLSink(log)])
    monitor.declare_integration("trl", {"beta": 0.0})
    _steps(monitor, 2)
    monitor.close()
    said = captions(build_report(log).read_text())["degenerate"]
    assert "This log has no iid prediction: " + NO_DATA[("grpo/groups/overdispersion", "trl")] + "." in said, said
    assert not [s for s in said if "observe_" in s], said


@pytest.mark.parametrize("integration,why", [
    ("trl", "TRL trains on each generation for several optimizer steps when num_iterations > 1"),
    ("api", "the other steps ended (end_step) without an observe_rollout call"),
], ids=["trl", "api"])
def test_steps_without_a_rollout_are_said_with_their_reason(tmp_path, integration, why):
    """A step that trained on an earlier generation (only observe_loss) leaves the rollout figures blank there; the
    degenerate caption counts the steps that logged a rollout and says why, for the run's integration."""
    from grpo_monitor.tools.reporting import build_report
    from test_report_captions import captions, check_page

    log = tmp_path / "monitor.jsonl"
    monitor = GRPOMonitor(MonitorConfig(group_size=4), sinks=[JSONLSink(log)])
    if integration != "api":
        monitor.declare_integration(integration, {"num_iterations": 2, "steps_per_generation": 1})
    for step in range(3):
        if step != 1:
            monitor.observe_rollout(torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]]),
                                    advantages=torch.tensor([[1.0, -1.0, 1.0, -1.0], [0.0, 0.0, 0.0, 0.0]]))
        monitor.observe_loss(mask=torch.ones(8, 3), logprobs=-torch.rand(8, 3), old_logprobs=-torch.rand(8, 3))
        monitor.end_step()
    monitor.close()
    page = build_report(log).read_text()
    check_page(page, log)
    said = [s for s in captions(page)["degenerate"] if s.startswith("Rollouts were logged at 2 of 3 steps: ")]
    assert len(said) == 1 and why in said[0], captions(page)["degenerate"]


@pytest.mark.parametrize("integration", sorted(set(INTEGRATIONS) - {"api"}))
def test_the_fallback_is_only_for_what_the_integration_logs(integration):
    """The "logs it at every step it observes" fallback is true only of families the integration's observe calls
    always log (groups, rewards, advantages, masks); a family it cannot log has its own row."""
    always = {"degenerate", "prompts", "question_std", "advantages", "convention", "split", "tokens"}
    fallback = NOT_OBSERVED.split("{who}")[1]
    for spec in (s for s in FIGURES if s.name != "violations"):
        if fallback in advice(spec.keys[0], integration, {}):
            assert spec.name in always, (integration, spec.name)
