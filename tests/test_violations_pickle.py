"""An InvariantViolation survives pickling with its records: a breach in a Ray actor reaches the driver's
``ray.get`` as an ``InvariantViolation`` (Ray pickles the exception), not as an undeserializable error."""

from __future__ import annotations

import pickle

from grpo_monitor import InvariantViolation
from grpo_monitor.violations import Violation


def test_round_trip_keeps_type_message_and_records():
    """pickle.loads(pickle.dumps(e)) is an InvariantViolation with the same message and Violation records."""
    v = Violation("zero_group_mean", 3, observed=0.3, expected="< 0.001", groups=("uid-1",), hint="not centred")
    err = InvariantViolation([v])
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is InvariantViolation and str(back) == str(err)
    assert back.violations == [v]
