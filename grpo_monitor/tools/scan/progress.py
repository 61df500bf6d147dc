"""A progress bar that appears only when a scan runs longer than a second (``rich``, on stderr).

Nothing is drawn for ``quiet`` scans, when rich is missing or when stderr is not a
terminal (CI logs stay clean); a ``console`` may be passed (tests force a terminal).

>>> bar = DelayedProgress(total=10, unit="rows", quiet=True)
>>> bar.advance(4); bar.shown
False
>>> bar.close()
"""

from __future__ import annotations

import importlib.util
import time
from typing import Any


class DelayedProgress:
    """Counts progress; draws a rich bar once ``delay`` seconds have passed since it was built."""

    def __init__(self, total: int | None, unit: str, description: str = "scanning", quiet: bool = False,
                 console: Any = None, delay: float = 1.0):
        self.total = total
        self.unit = unit
        self.description = description
        self.quiet = quiet or importlib.util.find_spec("rich") is None
        self.console = console
        self.delay = delay
        self.done = 0
        self.steps = 0
        self._start = time.monotonic()
        self._bar: Any = None
        self._task: Any = None

    @property
    def shown(self) -> bool:
        """Whether the bar has been drawn."""
        return self._bar is not None

    def advance(self, units: int, step: int | None = None) -> None:
        """Count ``units`` more (and one more step); draw or refresh the bar when it is due."""
        self.done += units
        self.steps += 1
        if self._bar is None:
            if self.quiet or time.monotonic() - self._start < self.delay:
                return
            if not self._start_bar():
                self.quiet = True
                return
        self._bar.update(self._task, completed=self.done, description=self._text(step))

    def _text(self, step: int | None) -> str:
        return f"{self.description} (step {step}, {self.steps} steps)" if step is not None else self.description

    def _start_bar(self) -> bool:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

        console = self.console if self.console is not None else Console(stderr=True)
        if not console.is_terminal:
            return False
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                             TimeRemainingColumn(), console=console, transient=True)
        self._task = self._bar.add_task(self.description, total=self.total or None, completed=self.done)
        self._bar.start()
        return True

    def close(self) -> None:
        """Remove the bar (it is transient: the summary follows in its place)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
