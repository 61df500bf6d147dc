"""Console: a compact table of the key metrics every N steps, every violation, and the run-health status line
(also on the step a finding opens or clears)."""

from __future__ import annotations

import importlib.util
import math
import sys
from typing import IO, Any

from ..report import StepReport
from .base import Sink

#: (label, key, format) of the metrics shown, in display order; absent keys are skipped.
KEY_METRICS: tuple[tuple[str, str, str], ...] = (
    ("groups", "grpo/groups/total", "{:.0f}"),
    ("degenerate rate", "grpo/groups/degenerate_rate", "{:.1%}"),
    ("degenerate rate (iid)", "grpo/groups/degenerate_rate_iid", "{:.1%}"),
    ("effective prompts", "grpo/groups/effective_prompts", "{:.0f}"),
    ("reward mean", "grpo/reward/mean", "{:.4g}"),
    ("question reward std", "grpo/reward/question_std_mean", "{:.4g}"),
    ("adv std (live groups)", "grpo/adv/live_std_mean", "{:.4g}"),
    ("max |group mean adv|", "grpo/adv/group_mean_abs_max", "{:.3g}"),
    ("KL k3 mean", "grpo/kl/k3_mean", "{:.4g}"),
    ("ratio clip frac", "grpo/ratio/clip_frac", "{:.1%}"),
    ("retention rate", "grpo/sampling/retention_rate", "{:.1%}"),
    ("live token fraction", "grpo/tokens/live_fraction", "{:.1%}"),
    ("response length", "grpo/tokens/response_length_mean", "{:.1f}"),
    ("violations", "grpo/invariants/violations", "{:.0f}"),
)


def _fmt(fmt: str, value: Any) -> str:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    return str(value) if not math.isfinite(value) else fmt.format(value)


def summary_rows(report: StepReport) -> list[tuple[str, str]]:
    """(label, formatted value) of the key metrics present in ``report``."""
    return [(label, _fmt(fmt, report.metrics[key])) for label, key, fmt in KEY_METRICS if key in report.metrics]


class ConsoleSink(Sink):
    """Prints a compact ``rich`` table on the first step, every step that is a multiple of
    ``every``, and every step with a violation, on the main process; plain text when ``rich`` is not installed or
    ``use_rich=False``. ``file`` defaults to the current ``sys.stdout``.
    """

    name = "console"

    def __init__(self, every: int = 10, *, file: IO[str] | None = None, use_rich: bool | None = None):
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"Expected argument `every` to be an int >= 1 but got {every!r}")
        self.every = every
        self.file = file
        self.use_rich = use_rich
        self._last_step: int | None = None

    def _due(self, report: StepReport) -> bool:
        first = self._last_step is None
        changed = report.health is not None and bool(report.health.opened or report.health.cleared)
        return first or bool(report.violations) or report.failed or changed or report.step % self.every == 0

    def log_report(self, report: StepReport) -> None:
        if not self._due(report):
            return
        self._last_step = report.step
        rich = self.use_rich if self.use_rich is not None else importlib.util.find_spec("rich") is not None
        file = self.file or sys.stdout
        (self._print_rich if rich else self._print_plain)(report, file)

    @staticmethod
    def _title(report: StepReport) -> str:
        title = f"grpo-monitor step {report.step}"
        if report.estimator:
            title += f" (estimator: {report.estimator})"
        return title + (" - RUN STOPPED BY A BREACH" if report.failed else "")

    def _print_plain(self, report: StepReport, file: IO[str]) -> None:
        cells = " | ".join(f"{label} {value}" for label, value in summary_rows(report))
        print(f"{self._title(report)}: {cells}", file=file)
        for v in report.violations:
            print(f"  VIOLATION {v.message()}", file=file)
        if report.health is not None:
            print(f"  {report.health.status_line()}", file=file)
        file.flush()

    def _print_rich(self, report: StepReport, file: IO[str]) -> None:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        console = Console(file=file, soft_wrap=False)
        console.print(Text(self._title(report), style="bold red" if report.failed else "bold"))
        table = Table(show_header=False, box=None, pad_edge=False, padding=(0, 1))
        for _ in range(2):  # two label/value pairs per row
            table.add_column(style="cyan")
            table.add_column(justify="right")
        rows = summary_rows(report)
        for left, right in zip(rows[::2], rows[1::2] + [("", "")], strict=False):
            table.add_row(*left, *right)
        console.print(table)
        for v in report.violations:
            console.print(Text.assemble(("VIOLATION ", "bold red"), v.message()))
        if report.health is not None:
            style = ("green", "yellow", "bold red")[report.health.status]
            console.print(Text(report.health.status_line(), style=style))
