"""The W&B workspace layout (built, never saved) and the wandb-workspace subcommand."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("wandb_workspaces")

from grpo_monitor.catalog.metrics import METRICS  # noqa: E402
from grpo_monitor.sinks.layout import KNOWN_KEYS, section_of  # noqa: E402
from grpo_monitor.sinks.wandb_workspace import build_workspace, describe_workspace  # noqa: E402
from grpo_monitor.tools.cli import build_parser, main  # noqa: E402

SECTIONS = ["Groups", "Advantages", "KL", "Mismatch", "Entropy", "Sampling", "Invariants", "Tokens", "Weights",
            "Monitor", "Integrations", "Health"]


def _line_plots(workspace):
    return [(s.name, p) for s in workspace.sections for p in s.panels if type(p).__name__ == "LinePlot"]


def test_sections_and_step_axis():
    """Sections come in order; every line plot uses grpo/step as x axis."""
    workspace = build_workspace("ent", "proj", "grpo view")
    assert (workspace.entity, workspace.project, workspace.name) == ("ent", "proj", "grpo view")
    assert [s.name for s in workspace.sections] == SECTIONS
    assert workspace.settings.x_axis == "grpo/step"
    assert all(p.x == "grpo/step" for _, p in _line_plots(workspace))


def test_every_catalogued_scalar_is_plotted_once_in_its_section():
    """Each scalar of METRICS appears in exactly one line plot, in its catalogued section."""
    plotted = []
    for section, panel in _line_plots(build_workspace("e", "p")):
        for key in panel.y:
            assert METRICS[key].section == section_of(key) == section, key
            plotted.append(key)
    scalars = [k for k, m in METRICS.items() if m.kind == "scalar"]
    assert sorted(plotted) == sorted(scalars) and set(KNOWN_KEYS) == set(scalars)


@pytest.mark.parametrize("key", ["grpo/adv/mean", "grpo/adv/std", "grpo/adv/convention_id",
                                 "grpo/kl/user_mean", "grpo/sampling/degenerate_rate_iid",
                                 "grpo/sampling/total_generated_groups", "grpo/monitor/disabled_parts",
                                 "grpo/trl/frac_reward_zero_std_gap"])
def test_keys_missing_from_the_0_1_layout_have_panels(key):
    """Keys the monitor emitted without a dashboard panel in 0.1 now have one."""
    assert any(key in panel.y for _, panel in _line_plots(build_workspace("e", "p")))


def test_related_keys_share_a_panel():
    """Observed degenerate rates beside their iid predictions; the three KL estimators together."""
    panels = [list(p.y) for _, p in _line_plots(build_workspace("e", "p"))]
    assert ["grpo/groups/degenerate_rate", "grpo/groups/degenerate_rate_iid"] in panels
    assert ["grpo/sampling/generated_degenerate_rate", "grpo/sampling/degenerate_rate_iid"] in panels
    assert ["grpo/kl/k1_max", "grpo/kl/k2_max", "grpo/kl/k3_max"] in panels


def test_question_table_panel_and_the_layout_validates():
    """Groups shows the per-question table; the layout converts to W&B's saved-view model."""
    workspace = build_workspace("e", "p")
    groups = describe_workspace(workspace)["sections"][0]
    assert {"type": "WeavePanelSummaryTable", "table_name": "grpo/questions"} in groups["panels"]
    panels = [p for s in describe_workspace(workspace)["sections"] for p in s["panels"]]
    tables = [p["table_name"] for p in panels if "table_name" in p]
    assert tables == [k for k, m in METRICS.items() if m.kind == "table"]
    assert workspace._to_model().spec is not None  # what save() would send, minus the network


def test_cli_dry_run_prints_the_layout(capsys):
    """--dry-run (alias --print) prints the layout as JSON and saves nothing."""
    for flag in ("--dry-run", "--print"):
        assert main(["wandb-workspace", "--entity", "e", "--project", "p", "--name", "n", flag]) == 0
        layout = json.loads(capsys.readouterr().out)
        assert layout["name"] == "n" and [s["name"] for s in layout["sections"]] == SECTIONS
        assert layout["x_axis"] == "grpo/step"


def test_cli_requires_entity_and_project(capsys):
    """The subcommand is registered, and entity/project are required arguments."""
    parser = build_parser()
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["wandb-workspace", "--entity", "e"])
    assert exit_info.value.code == 2
    assert "--project" in capsys.readouterr().err


def test_builder_rejects_empty_names():
    """Empty entity/project/name are worded errors, reported by the CLI with exit code 2."""
    with pytest.raises(ValueError, match="`project` to be a non-empty string"):
        build_workspace("e", "")
    assert main(["wandb-workspace", "--entity", "e", "--project", "", "--dry-run"]) == 2
