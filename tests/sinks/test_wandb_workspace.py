"""The W&B workspace layout (built, never saved) and the wandb-workspace subcommand."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("wandb_workspaces")

from grpo_monitor.cli import build_parser, main  # noqa: E402
from grpo_monitor.sinks.layout import KNOWN_KEYS, section_of  # noqa: E402
from grpo_monitor.sinks.wandb_workspace import build_workspace, describe_workspace  # noqa: E402

SECTIONS = ["Groups", "Advantages", "KL", "Sampling", "Invariants", "Tokens"]


def _line_plots(workspace):
    return [(s.name, p) for s in workspace.sections for p in s.panels if type(p).__name__ == "LinePlot"]


def test_sections_and_step_axis():
    """Sections come in order; every line plot uses grpo/step as x axis."""
    workspace = build_workspace("ent", "proj", "grpo view")
    assert (workspace.entity, workspace.project, workspace.name) == ("ent", "proj", "grpo view")
    assert [s.name for s in workspace.sections] == SECTIONS
    assert workspace.settings.x_axis == "grpo/step"
    assert all(p.x == "grpo/step" for _, p in _line_plots(workspace))


def test_every_key_is_plotted_in_its_section():
    """Each known key appears in a line plot of the section its prefix names."""
    plotted = {}
    for section, panel in _line_plots(build_workspace("e", "p")):
        for key in panel.y:
            assert section_of(key) == section, key
            plotted[key] = section
    assert set(plotted) == set(KNOWN_KEYS)


def test_degenerate_rate_beside_its_iid_prediction():
    """One panel plots the observed degenerate rate with the iid-predicted one."""
    panels = [p for _, p in _line_plots(build_workspace("e", "p"))]
    assert any(list(p.y) == ["grpo/groups/degenerate_rate", "grpo/groups/degenerate_rate_iid"] for p in panels)


def test_question_table_panel_and_the_layout_validates():
    """Groups shows the per-question table; the layout converts to W&B's saved-view model."""
    workspace = build_workspace("e", "p")
    groups = describe_workspace(workspace)["sections"][0]
    assert {"type": "WeavePanelSummaryTable", "table_name": "grpo/questions"} in groups["panels"]
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
