"""Property-based fuzzing of the monitor's API: it computes, records a breach, or raises a clear input error.

Every example drives a strict monitor (``strict=True``: the monitor's own faults surface as
failures) with ``on_violation="ignore"`` (breaches are recorded, not raised) through one to
three steps. Allowed outcomes of each call: it returns, or it raises
``InputValueError``/``InputTypeError`` whose message names the offending argument. Inputs
that are valid by construction must never raise, inputs broken on purpose must raise, and
the report's group counts must match an independent plain-Python enumeration.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.sinks.jsonl import encode_line
from grpo_monitor.step.inputs import InputTypeError, InputValueError
from references import population_of_groups

#: Examples per test; the file runs in well under a minute on two CPU cores.
MAX_EXAMPLES = int(os.environ.get("GRPO_MONITOR_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=MAX_EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
ARGUMENTS = ("rewards", "advantages", "group_ids", "question_ids", "lengths", "mask", "logprobs",
             "ref_logprobs", "old_logprobs", "kl", "step")
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
DTYPES = FLOAT_DTYPES + (torch.int32, torch.int64, torch.bool)
LAYOUTS = ("BG", "flat_int", "flat_str", "flat_group_size")
SPECIALS = (0.0, 1.0, 0.5, -1.0, 2.0, math.nan, math.inf, -math.inf, 1e-30, 3e4)


# ------------------------------------------------------------------ strategies
@st.composite
def reward_values(draw, n: int, dtype: torch.dtype) -> torch.Tensor:
    """``n`` rewards of ``dtype``; floats mix 0/1 with NaN, inf, tiny and large values."""
    if dtype == torch.bool:
        return torch.tensor(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=dtype)
    if not dtype.is_floating_point:
        return torch.tensor(draw(st.lists(st.integers(-3, 3), min_size=n, max_size=n)), dtype=dtype)
    element = st.one_of(st.sampled_from((0.0, 1.0)), st.sampled_from(SPECIALS),
                        st.floats(-10, 10, allow_nan=False, width=16))
    return torch.tensor(draw(st.lists(element, min_size=n, max_size=n)), dtype=torch.float64).to(dtype)


@st.composite
def rollouts(draw, group_size: int | None):
    """One ``observe_rollout`` call: (kwargs, groups by row as lists of row indices, broken on purpose?)."""
    layout = draw(st.sampled_from(LAYOUTS if group_size else LAYOUTS[:3]))
    dtype = draw(st.sampled_from(DTYPES))
    if layout == "BG":
        b, g = draw(st.integers(0, 5)), draw(st.integers(0, 6))
        rewards = draw(reward_values(b * g, dtype)).reshape(b, g)
        groups = [list(range(i * g, (i + 1) * g)) for i in range(b)] if g else []
        kwargs = dict(rewards=rewards)
    elif layout == "flat_group_size":
        b = draw(st.integers(0, 5))
        rewards = draw(reward_values(b * group_size, dtype))
        groups = [list(range(i * group_size, (i + 1) * group_size)) for i in range(b)]
        kwargs = dict(rewards=rewards)
    else:
        n = draw(st.integers(0, 20))
        ids = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))  # interleaved, sizes 1.. (G=1 included)
        rewards = draw(reward_values(n, dtype))
        first = list(dict.fromkeys(ids))
        groups = [[i for i, x in enumerate(ids) if x == label] for label in first]
        group_ids = torch.tensor(ids, dtype=torch.int64) if layout == "flat_int" else [f"uid-{x}" for x in ids]
        kwargs = dict(rewards=rewards, group_ids=group_ids)
    kwargs.update(draw(_advantages(kwargs["rewards"], groups)))
    if groups and draw(st.booleans()):
        kwargs["question_ids"] = [f"q{draw(st.integers(0, 3))}" for _ in groups]
    broken = draw(st.sampled_from((None, None, None, "advantages", "group_ids", "rewards")))
    return _break(kwargs, broken, layout), groups, broken if _breakable(kwargs, broken, layout) else None


@st.composite
def _advantages(draw, rewards: torch.Tensor, groups: list[list[int]]) -> dict:
    """No advantages, a correct float64 GRPO computation cast to a float dtype, or arbitrary values."""
    kind = draw(st.sampled_from(("none", "grpo", "grpo", "arbitrary")))
    if kind == "none":
        return {}
    dtype = draw(st.sampled_from(FLOAT_DTYPES))
    if kind == "grpo":
        adv = population_of_groups(rewards.reshape(-1).double().tolist(), groups,
                                   draw(st.sampled_from((0.0, 1e-6, 1e-4))))
    else:
        adv = draw(reward_values(rewards.numel(), torch.float64)).tolist()
    return {"advantages": torch.tensor(adv, dtype=torch.float64).to(dtype).reshape(rewards.shape)}


def _breakable(kwargs: dict, broken: str | None, layout: str) -> bool:
    if broken == "advantages":
        return "advantages" in kwargs
    if broken == "group_ids":
        return "group_ids" in kwargs
    return broken == "rewards"


def _break(kwargs: dict, broken: str | None, layout: str) -> dict:
    """Break one argument on purpose: misaligned advantages, one id too many, 3-D rewards."""
    if not _breakable(kwargs, broken, layout):
        return kwargs
    out = dict(kwargs)
    if broken == "advantages":
        out["advantages"] = torch.cat([kwargs["advantages"].reshape(-1),
                                       torch.zeros(1, dtype=kwargs["advantages"].dtype)])
    elif broken == "group_ids":
        ids = kwargs["group_ids"]
        out["group_ids"] = (torch.cat([ids, torch.zeros(1, dtype=ids.dtype)]) if isinstance(ids, torch.Tensor)
                            else ids + ["uid-0"])
    else:
        out["rewards"] = kwargs["rewards"].reshape(1, 1, -1)
        out.pop("group_ids", None)
        out.pop("question_ids", None)
        out.pop("advantages", None)
    return out


# ------------------------------------------------------------------ oracle
def _call(fn, *args, **kwargs) -> bool:
    """Run one API call; True when it returned, False on a clear input error. Anything else fails."""
    try:
        fn(*args, **kwargs)
    except (InputValueError, InputTypeError) as exc:
        assert any(name in str(exc) for name in ARGUMENTS), f"input error names no argument: {exc}"
        return False
    return True


def _expected_counts(rewards: torch.Tensor, groups: list[list[int]]) -> tuple[int, int]:
    """(groups, degenerate groups) by enumeration: degenerate = fewer than two distinct scorable rewards."""
    r = rewards.reshape(-1).double().tolist()
    degenerate = sum(len({r[i] for i in rows if not math.isnan(r[i])}) <= 1 for rows in groups)
    return len(groups), degenerate


def _check_report(report, expected_groups: int, expected_degenerate: int) -> None:
    """Every metric is a float; the group counts match the enumeration; the record encodes."""
    assert all(isinstance(v, float) for v in report.metrics.values()), report.metrics
    encode_line(report.to_dict())
    if expected_groups:
        assert report.metrics["grpo/groups/total"] == expected_groups
        assert report.metrics["grpo/groups/degenerate_rate"] == expected_degenerate / expected_groups
    else:
        assert "grpo/groups/total" not in report.metrics


# ------------------------------------------------------------------ tests
@st.composite
def runs(draw):
    """A config and 1-3 steps of 1-2 rollout calls each (sometimes a generation call too)."""
    group_size = draw(st.sampled_from((None, 2, 4)))
    steps = [draw(st.lists(rollouts(group_size), min_size=1, max_size=2)) for _ in range(draw(st.integers(1, 3)))]
    return group_size, draw(st.booleans()), steps


@FUZZ
@given(run=runs())
def test_rollouts_compute_breach_or_raise_clearly(run):
    """Any mix of layouts, dtypes, NaN/inf and sizes: the monitor computes, records a breach, or raises an input
    error."""
    group_size, deferred, steps = run
    mon = GRPOMonitor(MonitorConfig(group_size=group_size, defer_checks=deferred, on_violation="ignore", strict=True))
    for calls in steps:
        groups = degenerate = 0
        for kwargs, rows, broken in calls:
            accepted = _call(mon.observe_rollout, **kwargs)
            assert accepted == (broken is None), (broken, kwargs)
            if accepted:
                g, d = _expected_counts(kwargs["rewards"], rows)
                groups, degenerate = groups + g, degenerate + d
            if accepted and rows and len(calls) == 1:
                assert _call(mon.observe_generation, kwargs["rewards"], group_ids=kwargs.get("group_ids"))
        _check_report(mon.end_step(), groups, degenerate)
    assert mon.step == len(steps)


@FUZZ
@given(
    b=st.integers(0, 4), t=st.integers(0, 6), dtype=st.sampled_from(FLOAT_DTYPES),
    mask_kind=st.sampled_from(("binary", "bool", "weights", "int")),
    with_adv=st.booleans(), with_logprobs=st.booleans(), with_old=st.booleans(),
    mismatch=st.sampled_from((None, None, "logprobs", "advantages")), data=st.data(),
)
def test_observe_loss_computes_breach_or_raises_clearly(b, t, dtype, mask_kind, with_adv, with_logprobs, with_old,
                                                        mismatch, data):
    """Token masks, advantages and log-probs with NaN/inf and mismatched shapes: compute, breach or input error."""
    pytest.importorskip("grpo_monitor.stats.tokens", reason="the loss-side statistics module is not in this tree yet")
    mon = GRPOMonitor(MonitorConfig(on_violation="ignore", strict=True))
    values = lambda: data.draw(reward_values(b * t, torch.float64)).to(dtype).reshape(b, t)  # noqa: E731
    bits = data.draw(reward_values(b * t, torch.bool)).reshape(b, t)
    mask = {"binary": bits.float(), "bool": bits, "int": bits.long(), "weights": values()}[mask_kind]
    kwargs = {"mask": mask}
    if with_adv:
        kwargs["advantages"] = values()
    if with_logprobs:
        kwargs["logprobs"] = -values().abs()
        if with_old:
            kwargs["old_logprobs"] = -values().abs()
    broken = mismatch if mismatch in kwargs else None
    if broken:
        kwargs[broken] = torch.zeros(b + 1, t + 1, dtype=dtype)
    assert _call(mon.observe_loss, **kwargs) == (broken is None)
    report = mon.end_step()
    assert all(isinstance(v, float) for v in report.metrics.values())
    encode_line(report.to_dict())


@FUZZ
@given(
    value=st.one_of(
        st.none(), st.text(max_size=3), st.integers(), st.floats(), st.dictionaries(st.text(max_size=2), st.integers(),
                                                                                    max_size=2),
        st.lists(st.text(max_size=2), min_size=1, max_size=3), st.lists(st.lists(st.integers(), max_size=3), min_size=2,
                                                                        max_size=3),
        st.builds(lambda k: np.array(["x"] * k), st.integers(1, 3)), st.builds(lambda k: torch.ones(k, 2, 2),
                                                                               st.integers(1, 2)),
        st.builds(lambda k: torch.ones(k, dtype=torch.complex64), st.integers(1, 3)),
    ),
    argument=st.sampled_from(("rewards", "advantages", "group_ids", "question_ids")),
)
def test_non_numeric_and_malformed_arguments_raise_clear_errors(value, argument):
    """Strings, None, dicts, ragged lists, complex or 3-D tensors in any argument: an input error or a valid call."""
    mon = GRPOMonitor(MonitorConfig(on_violation="ignore", strict=True))
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    kwargs = {"rewards": rewards, "group_ids": [0, 0, 1, 1]}
    kwargs[argument] = value
    accepted = _call(mon.observe_rollout, **kwargs)
    report = mon.end_step()
    if argument == "rewards":
        assert not accepted  # no drawn value is a valid flat reward vector for these group_ids
    elif accepted:
        _check_report(report, 2, 1)
