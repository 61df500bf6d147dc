"""TensorBoard: scalars, histograms, violation text and a custom-scalars layout."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..report import StepReport
from .base import Sink
from .layout import KNOWN_KEYS, charts, section_of
from .registry import SINKS
from .rows import finite

if TYPE_CHECKING:  # imported on first use only: tensorboard is optional
    from torch.utils.tensorboard import SummaryWriter

#: The text tag that holds a step's violation messages.
VIOLATIONS_TAG = "grpo/violations"
#: The text tag that holds the run parameters (a markdown table, at step 0).
CONFIG_TAG = "grpo/config"
#: The text tag that holds alerts (a run-health finding's onset or clearing, a part switched off).
ALERTS_TAG = "grpo/alerts"


def custom_scalars_layout(keys: Iterable[str] = KNOWN_KEYS) -> dict[str, dict[str, list]]:
    """The ``SummaryWriter.add_custom_scalars`` layout for ``keys`` (default: every catalogued scalar).

    Sections (Groups, Advantages, KL, Sampling, Invariants, Tokens, Monitor, Integrations;
    see :func:`grpo_monitor.sinks.layout.charts`) map chart titles to
    ``["Multiline", tags]``; tags are anchored regexes, since TensorBoard treats them as
    patterns and ``grpo/groups/degenerate_rate`` would otherwise also match ``..._iid``.

    >>> custom_scalars_layout(["grpo/adv/stabilizer"])
    {'Advantages': {'grpo/adv/stabilizer': ['Multiline', ['^grpo/adv/stabilizer$']]}}
    """
    return {
        section: {title: ["Multiline", [f"^{re.escape(k)}$" for k in members]] for title, members in panels}
        for section, panels in charts(keys).items()
    }


class TensorBoardSink(Sink):
    """Writes each report to a TensorBoard event file in ``log_dir``.

    Scalars go under their ``grpo/...`` keys, histograms (per-question reward std,
    advantages) under theirs, violation messages as markdown text under
    ``grpo/violations``. The custom-scalars layout is written on the first step and
    rewritten when a key outside it appears. The ``SummaryWriter`` is created on first
    use and exposed as :attr:`writer`; events are flushed after every step.
    """

    name = "tensorboard"

    def __init__(self, log_dir: str | os.PathLike, **writer_kwargs: Any):
        self.log_dir = os.fspath(log_dir)
        self.writer_kwargs = writer_kwargs
        self._writer: SummaryWriter | None = None
        self._layout_keys: set[str] = set()
        self._step = 0  # the latest report's step: an alert is written there

    @classmethod
    def for_tracker(cls, *, output_dir: str | os.PathLike | None,
                    tensorboard_dir: str | os.PathLike | None) -> TensorBoardSink:
        """In the trainer's TensorBoard folder (default ``<output_dir>/runs``)."""
        return cls(tensorboard_dir or Path(output_dir or ".") / "runs")

    @property
    def writer(self) -> SummaryWriter:
        """The ``torch.utils.tensorboard.SummaryWriter`` (created on first access); ``tensorboardX``'s, which
        writes the same event files, when only that is installed (AReaL's TensorBoard writer)."""
        if self._writer is None:
            kwargs = dict(self.writer_kwargs)
            if importlib.util.find_spec("tensorboard") is not None:
                from torch.utils.tensorboard import SummaryWriter
            elif importlib.util.find_spec("tensorboardX") is not None:
                from tensorboardX import SummaryWriter  # type: ignore[no-redef]

                # tensorboardX names its file by second and host only: a trainer's writer opened in the same
                # folder and second (AReaL's) would share, and lose, the file
                kwargs.setdefault("filename_suffix", f".{os.getpid()}.grpo-monitor")
            else:
                raise ModuleNotFoundError(
                    "TensorBoardSink needs the `tensorboard` package (or `tensorboardX`); install it with "
                    f"`pip install grpo-monitor[{SINKS['tensorboard'].extra}]`"
                )
            self._writer = SummaryWriter(log_dir=self.log_dir, **kwargs)
        return self._writer

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._update_layout(metrics)
        for key, value in metrics.items():
            self.writer.add_scalar(key, float(value), global_step=step)

    def log_histogram(self, key: str, values: Sequence[float], step: int) -> None:
        kept = finite(values)
        if kept:  # TensorBoard cannot bin an empty or all-NaN histogram
            import numpy as np

            self.writer.add_histogram(key, np.asarray(kept, dtype=np.float64), global_step=step)

    def log_text(self, key: str, text: str, step: int) -> None:
        """Write markdown ``text`` under ``key`` for ``step``."""
        self.writer.add_text(key, text, global_step=step)

    def log_config(self, params: dict[str, Any]) -> None:
        """The run parameters as a markdown table under ``grpo/config`` (TensorBoard's text tab)."""
        rows = "\n".join(f"| `{key}` | `{value}` |" for key, value in params.items())
        self.log_text(CONFIG_TAG, f"| parameter | value |\n|---|---|\n{rows}", 0)
        self.writer.flush()

    def alert(self, title: str, text: str, level: str = "ERROR") -> None:
        """An alert as markdown text under ``grpo/alerts`` at the latest report's step (TensorBoard has none)."""
        self.log_text(ALERTS_TAG, f"**{level}: {title}**\n\n{text}", self._step)
        self.writer.flush()

    def log_report(self, report: StepReport) -> None:
        self._step = report.step
        self.log(report.metrics, report.step)
        for key, values in report.histograms.items():
            self.log_histogram(key, values, report.step)
        if report.violations:
            lines = [f"- **{v.invariant}**: {v.message()}" for v in report.violations]
            if report.failed:
                lines.insert(0, f"**Run stopped by a breach at step {report.step}.**\n")
            self.log_text(VIOLATIONS_TAG, "\n".join(lines), report.step)
        self.writer.flush()

    def _update_layout(self, metrics: dict[str, float]) -> None:
        new = {k for k in metrics if section_of(k) is not None} - self._layout_keys
        if self._layout_keys and not new:
            return
        self._layout_keys |= set(KNOWN_KEYS) | new
        # TensorBoard shows the latest layout written, so a rewrite replaces the first one.
        self.writer.add_custom_scalars(custom_scalars_layout(sorted(self._layout_keys, key=_known_first)))

    def finish(self, failed: bool = False) -> None:
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
            self._writer = None


_KNOWN_ORDER = {key: i for i, key in enumerate(KNOWN_KEYS)}


def _known_first(key: str) -> tuple[int, str]:
    """Sort key: the catalogued keys in their display order, then others alphabetically."""
    return (_KNOWN_ORDER[key], "") if key in _KNOWN_ORDER else (len(KNOWN_KEYS), key)
