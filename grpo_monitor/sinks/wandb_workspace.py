"""A saved W&B workspace for grpo-monitor runs, built as data (saving is the CLI's job).

One section per section of the metric catalogue (Groups, Advantages, KL, Mismatch, Entropy,
Sampling, Invariants, Tokens, Weights, Monitor, Integrations), holding line plots with
``grpo/step`` on the x axis: one per catalogued scalar, or per group of related ones (the
layout of :mod:`grpo_monitor.sinks.layout`, shared with TensorBoard), e.g. the observed
degenerate rate beside its iid prediction, the three KL estimators together, the mismatch
KL k1 and k3, the importance weight's min / mean / max, the degenerate split (unsolved /
solved / other), the entropy's mean and std; catalogued tables
(the per-question ``grpo/questions``) get a table panel in their section.
"""

from __future__ import annotations

from typing import Any

from ..catalog.metrics import METRICS
from .base import require
from .layout import KNOWN_KEYS, STEP_KEY, charts

#: The per-question table the W&B sink logs; shown in the Groups section.
QUESTIONS_TABLE = "grpo/questions"


def _tables_by_section() -> dict[str, tuple[str, ...]]:
    sections = dict.fromkeys(m.section for m in METRICS.values() if m.kind == "table")
    return {s: tuple(k for k, m in METRICS.items() if m.kind == "table" and m.section == s) for s in sections}


#: Section -> the catalogued tables shown in it, each as a table panel.
TABLES: dict[str, tuple[str, ...]] = _tables_by_section()


def build_workspace(entity: str, project: str, name: str = "grpo-monitor"):
    """The ``wandb_workspaces.workspaces.Workspace`` of the grpo-monitor panels (not saved).

    Pure: builds objects only; ``workspace.save()`` needs network and an API key.
    """
    for arg, value in (("entity", entity), ("project", project), ("name", name)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"Expected argument `{arg}` to be a non-empty string but got {value!r}")
    require("wandb_workspaces", "building a W&B workspace needs the `wandb-workspaces` package", "wandb")
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    sections = []
    for section, panels in charts(KNOWN_KEYS).items():
        plots: list[Any] = [wr.LinePlot(title=title, x=STEP_KEY, y=list(keys)) for title, keys in panels]
        plots += [wr.WeavePanelSummaryTable(table_name=table) for table in TABLES.get(section, ())]
        sections.append(ws.Section(name=section, panels=plots, is_open=True))
    return ws.Workspace(
        entity=entity,
        project=project,
        name=name,
        sections=sections,
        settings=ws.WorkspaceSettings(x_axis=STEP_KEY),
    )


def describe_workspace(workspace: Any) -> dict[str, Any]:
    """A JSON-ready summary of a workspace: sections, and per panel its type, title, axes."""
    return {
        "entity": workspace.entity,
        "project": workspace.project,
        "name": workspace.name,
        "x_axis": workspace.settings.x_axis,
        "sections": [
            {"name": section.name, "panels": [_describe_panel(p) for p in section.panels]}
            for section in workspace.sections
        ],
    }


def _describe_panel(panel: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": type(panel).__name__}
    for field in ("title", "x", "y", "table_name"):
        value = getattr(panel, field, None)
        if value is not None:
            out[field] = list(value) if isinstance(value, (list, tuple)) else value
    return out
