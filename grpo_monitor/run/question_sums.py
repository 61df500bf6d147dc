"""Per-group values summed per distinct question, for :meth:`grpo_monitor.run.history.QuestionHistory.update`."""

from __future__ import annotations

import numpy as np


class QuestionSums:
    """Per-group values summed per distinct question (``codes``: first-appearance codes of ``m`` questions). With one
    group per question (the codes are ``0..m-1`` in order) a sum is the values themselves: no bincount."""

    def __init__(self, codes: np.ndarray, m: int) -> None:
        self.codes, self.m, self.distinct = codes, m, m == len(codes)

    def sums(self, weights: np.ndarray) -> np.ndarray:
        if self.distinct:
            return np.asarray(weights, dtype=np.float64) + 0.0  # a new array, and -0.0 summed to 0.0 as bincount does
        return np.bincount(self.codes, weights=weights, minlength=self.m)

    def count(self) -> np.ndarray:
        return np.ones(self.m, dtype=np.int64) if self.distinct else np.bincount(self.codes, minlength=self.m)

    def last(self) -> np.ndarray:
        """Each question's last group."""
        if self.distinct:
            return np.arange(self.m, dtype=np.int64)
        last_group = np.full(self.m, -1, dtype=np.int64)
        np.maximum.at(last_group, self.codes, np.arange(len(self.codes)))
        return last_group
