"""QuestionSums: per-question sums, counts and last groups equal np.bincount's and a Python loop's."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_monitor.run.question_sums import QuestionSums


def _codes(ids: list[str]) -> tuple[np.ndarray, int]:
    index: dict[str, int] = {}
    return np.asarray([index.setdefault(q, len(index)) for q in ids], dtype=np.int64), len(index)


@pytest.mark.parametrize("ids", [
    pytest.param(["a", "b", "c", "d"], id="one-group-each"),
    pytest.param(["a", "b", "a", "c", "b", "a"], id="repeated"),
    pytest.param(["a"], id="one"),
])
def test_sums_counts_and_last_groups(ids):
    """Against a loop over the groups: the sum of each question's values, its groups, the index of its last one."""
    codes, m = _codes(ids)
    values = np.array([0.5, -0.0, 2.0, np.nan, 1.0, 3.0])[:len(ids)]
    flags = np.array([True, False, True, True, False, True])[:len(ids)]
    q = QuestionSums(codes, m)
    want_sums, want_flags = np.zeros(m), np.zeros(m)
    want_count, want_last = np.zeros(m, dtype=np.int64), np.full(m, -1)
    for i, c in enumerate(codes):
        want_sums[c] += values[i]
        want_flags[c] += flags[i]
        want_count[c] += 1
        want_last[c] = i
    np.testing.assert_array_equal(q.sums(values), want_sums)
    np.testing.assert_array_equal(q.sums(flags), want_flags)
    np.testing.assert_array_equal(q.count(), want_count)
    np.testing.assert_array_equal(q.last(), want_last)
    np.testing.assert_array_equal(q.sums(values), np.bincount(codes, weights=values, minlength=m))


def test_negative_zero_sums_to_zero_as_bincount_does():
    """A question whose one value is -0.0 sums to +0.0, as np.bincount's sum does."""
    values = np.array([-0.0, 1.0])
    got, want = QuestionSums(np.arange(2), 2).sums(values), np.bincount(np.arange(2), weights=values)
    assert np.signbit(got).tolist() == np.signbit(want).tolist() == [False, False]


def test_sums_are_new_arrays():
    """The sums of one group per question are a copy: writing into them leaves the values alone."""
    values = np.array([1.0, 2.0])
    out = QuestionSums(np.arange(2), 2).sums(values)
    out[0] = 9.0
    assert values[0] == 1.0
