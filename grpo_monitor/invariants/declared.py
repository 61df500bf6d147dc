"""``declared_check``: every check the config declares receives its inputs (the decision:
:func:`grpo_monitor.step.declared.unmet`, which knows each declared check's inputs)."""

from __future__ import annotations

from .record import Invariant

RECORDS: tuple[Invariant, ...] = (
    Invariant("declared_check", "every check the config declares receives the inputs it needs, so it runs",
              "a declared check whose input never arrives (expect_on_policy=True without old_logprobs=, "
              "on_policy_bitwise=True without expect_on_policy, a declared loss_aggregation with loss= but no "
              "advantages=, a multi-reward estimator without reward_components=): pass it, or drop the declaration",
              "steps", None, "warning", lambda cfg: "every declared check's inputs passed", said_once=True),
)
