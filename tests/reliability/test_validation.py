"""Input validation at the API boundary: worded errors for bad input, accepted dtypes, empty batches, breaches as
data."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.step.inputs import InputError, InputTypeError, InputValueError
from grpo_monitor.violations import InvariantViolation
from references import advantages

R = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])  # one live group, one degenerate
ADV = advantages(R, "population", 1e-6)


def _monitor(**config) -> GRPOMonitor:
    return GRPOMonitor(MonitorConfig(**{"on_violation": "ignore", "strict": True, **config}))


# ------------------------------------------------------------------ bad input
BAD_ROLLOUTS = [
    pytest.param(dict(rewards=R, advantages=ADV[:, :3]), InputValueError, ["advantages", "(2, 3)", "(2, 4)"],
                 id="advantages-shape"),
    pytest.param(dict(rewards=R, advantages=ADV.reshape(-1)[:7]), InputValueError, ["advantages", "(7,)", "(2, 4)"],
                 id="advantages-length"),
    pytest.param(dict(rewards=R.reshape(-1), group_ids=[0, 1]), InputValueError, ["group_ids", "2 entries", "8 rows"],
                 id="group_ids-length"),
    pytest.param(dict(rewards=R.reshape(-1), group_ids=torch.zeros(2, 4, dtype=torch.long)), InputValueError,
                 ["group_ids", "(2, 4)", "(8,)"], id="group_ids-2d"),
    pytest.param(dict(rewards=R.reshape(-1), group_ids=torch.zeros(8)), InputTypeError, ["group_ids", "torch.float32"],
                 id="group_ids-float"),
    pytest.param(dict(rewards=R.reshape(-1), group_ids=[[0]] * 8), InputTypeError, ["group_ids", "hashable", "list"],
                 id="group_ids-unhashable"),
    pytest.param(dict(rewards=R.reshape(-1), group_ids="aaaabbbb"), InputTypeError, ["group_ids", "str"],
                 id="group_ids-string"),
    pytest.param(dict(rewards=R.reshape(-1), group_ids=7), InputTypeError, ["group_ids", "int"], id="group_ids-scalar"),
    pytest.param(dict(rewards=R, group_ids=[0] * 8), InputValueError, ["group_ids", "(B, G)"],
                 id="group_ids-with-2d-rewards"),
    pytest.param(dict(rewards=R, question_ids=["a", "b", "c"]), InputValueError,
                 ["question_ids", "3 entries", "(2)", "(8)"],
                 id="question_ids-length"),
    pytest.param(dict(rewards=R, question_ids=[["a"], ["b"]]), InputTypeError, ["question_ids", "hashable"],
                 id="question_ids-unhashable"),
    pytest.param(dict(rewards=R, question_ids=5), InputTypeError, ["question_ids", "int"], id="question_ids-scalar"),
    pytest.param(dict(rewards=R[None]), InputValueError, ["rewards", "3-D", "(1, 2, 4)"], id="rewards-3d"),
    pytest.param(dict(rewards=torch.tensor(1.0)), InputValueError, ["rewards", "0-D"], id="rewards-0d"),
    pytest.param(dict(rewards=R.reshape(-1)), InputValueError, ["rewards", "(8,)", "group_ids", "group_size"],
                 id="flat-no-grouping"),
    pytest.param(dict(rewards=["a", "b"]), InputTypeError,
                 ["rewards", "numbers", "rewards[0] is 'a' (str)", "float('nan') to mark an unscorable row"],
                 id="rewards-strings"),
    pytest.param(dict(rewards="1,0,1"), InputTypeError, ["rewards", "str"], id="rewards-str"),
    pytest.param(dict(rewards=None), InputTypeError, ["rewards", "NoneType"], id="rewards-none"),
    pytest.param(dict(rewards={"a": 1.0}), InputTypeError, ["rewards", "dict"], id="rewards-dict"),
    pytest.param(dict(rewards=[[1, 0], [1]]), InputTypeError, ["rewards", "numbers"], id="rewards-ragged"),
    pytest.param(dict(rewards=np.array([["x"] * 4] * 2)), InputTypeError, ["rewards", "<U1"], id="rewards-numpy-str"),
    pytest.param(dict(rewards=np.array([[None] * 4] * 2)), InputTypeError, ["rewards", "object"],
                 id="rewards-numpy-object"),
    pytest.param(dict(rewards=R.to(torch.complex64)), InputTypeError, ["rewards", "complex64"], id="rewards-complex"),
    pytest.param(dict(rewards=R, advantages=np.array([["x"] * 4] * 2)), InputTypeError, ["advantages", "<U1"],
                 id="advantages-numpy-str"),
    pytest.param(dict(rewards=R, advantages=ADV.to("meta")), InputTypeError, ["advantages", "meta"],
                 id="advantages-meta-device"),
    pytest.param(dict(rewards=R.to("meta")), InputTypeError, ["rewards", "meta", "(2, 4)"], id="rewards-meta-device"),
]


@pytest.mark.parametrize("kwargs, error, words", BAD_ROLLOUTS)
def test_bad_rollout_input_raises_a_worded_error(kwargs, error, words):
    """Each malformed argument raises ValueError/TypeError naming the argument, the expectation and what came."""
    with pytest.raises(error) as info:
        _monitor().observe_rollout(**kwargs)
    assert isinstance(info.value, InputError) and isinstance(info.value, (ValueError, TypeError))
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_flat_rewards_not_dividing_group_size_raise():
    """Flat rewards whose length is not a multiple of group_size name both numbers."""
    with pytest.raises(InputValueError, match=r"rewards has 7 rows, not a multiple of config.group_size=4"):
        _monitor(group_size=4).observe_rollout(torch.ones(7))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device for a real cross-device pair")
def test_rewards_and_advantages_on_different_real_devices_raise():
    """CPU rewards with CUDA advantages raise an error naming both devices."""
    with pytest.raises(InputValueError, match=r"advantages is on cuda.* but rewards is on cpu"):
        _monitor().observe_rollout(R, advantages=ADV.cuda())


@pytest.mark.parametrize("kwargs, words", [
    pytest.param(dict(lengths=torch.ones(3)), ["lengths", "(3,)", "(2, 4)"], id="lengths-shape"),
    pytest.param(dict(question_ids=["a"]), ["question_ids", "1 entries"], id="question_ids-length"),
])
def test_bad_generation_input_raises_a_worded_error(kwargs, words):
    """observe_generation checks its per-row and per-group arguments like observe_rollout."""
    with pytest.raises(InputValueError) as info:
        _monitor().observe_generation(R, **kwargs)
    assert all(word in str(info.value) for word in words), str(info.value)


@pytest.mark.parametrize("step, error, words", [
    pytest.param("3", InputTypeError, ["step", "str"], id="string"),
    pytest.param(2.5, InputTypeError, ["step", "float"], id="float"),
    pytest.param(True, InputTypeError, ["step", "bool"], id="bool"),
    pytest.param(-1, InputValueError, ["step", "-1"], id="negative"),
])
def test_bad_step_argument_raises_a_worded_error(step, error, words):
    """end_step(step=...) takes an int >= 0 and names what it got otherwise."""
    with pytest.raises(error) as info:
        _monitor().end_step(step)
    assert all(word in str(info.value) for word in words), str(info.value)


def test_step_going_back_raises_and_the_monitor_keeps_working():
    """A step number below the last one is an input error (the history needs order); the next good step works."""
    mon = _monitor(strict=False)
    mon.observe_rollout(R, question_ids=["a", "b"])
    mon.end_step(5)
    with pytest.raises(InputValueError, match=r"step must be >= the last step 5.* got 3"):
        mon.end_step(3)
    mon.observe_rollout(R, question_ids=["a", "b"])
    assert mon.end_step(5).metrics["grpo/groups/total"] == 2.0
    assert mon.end_step(np.int64(9)).step == 9


@pytest.mark.skipif(
    importlib.util.find_spec("grpo_monitor.stats.tokens") is None,
    reason="the loss-side statistics module is not in this tree yet",
)
@pytest.mark.parametrize("kwargs, words", [
    pytest.param(dict(mask=torch.ones(2, 5), logprobs=torch.zeros(2, 4)), ["logprobs", "(2, 4)", "(2, 5)"],
                 id="logprobs-shape"),
    pytest.param(dict(mask=torch.ones(2, 5), advantages=torch.zeros(3, 5)), ["advantages", "(3, 5)", "(2, 5)"],
                 id="advantages-shape"),
    pytest.param(dict(mask=torch.ones(2, 5), old_logprobs=torch.zeros(2, 5, 1)), ["old_logprobs"],
                 id="old_logprobs-3d"),
    pytest.param(dict(mask="ones"), ["mask", "str"], id="mask-str"),
])
def test_bad_loss_input_raises_a_worded_error(kwargs, words):
    """observe_loss names the token tensor whose shape or type disagrees with the mask."""
    with pytest.raises((InputValueError, InputTypeError)) as info:
        _monitor().observe_loss(**kwargs)
    assert all(word in str(info.value) for word in words), str(info.value)


def test_input_errors_never_disable_the_monitor():
    """A fail-open monitor re-raises input errors and keeps every part working afterwards."""
    mon = _monitor(strict=False)
    for bad in (dict(rewards=R[None]), dict(rewards=R, advantages=ADV[:1]), dict(rewards=R, question_ids=[[1], [2]])):
        with pytest.raises(InputError):
            mon.observe_rollout(**bad)
    mon.observe_rollout(R, advantages=ADV)
    assert mon.end_step().metrics["grpo/groups/total"] == 2.0
    assert not mon.disabled_parts


# ------------------------------------------------------------------ accepted input
def _reference(rewards: list[list[float]]) -> dict[str, float]:
    """Groups, degenerate rate and mean reward by enumeration in plain Python."""
    flat = [float(x) for row in rewards for x in row]
    return {
        "grpo/groups/total": float(len(rewards)),
        "grpo/groups/degenerate_rate": sum(len(set(row)) == 1 for row in rewards) / len(rewards),
        "grpo/reward/mean": sum(flat) / len(flat),
    }


@pytest.mark.parametrize("rewards", [
    pytest.param(R.long(), id="int64"),
    pytest.param(R.int(), id="int32"),
    pytest.param(R.bool(), id="bool"),
    pytest.param(R.half(), id="float16"),
    pytest.param(R.bfloat16(), id="bfloat16"),
    pytest.param(R.numpy().astype(np.int8), id="numpy-int8"),
    pytest.param(R.numpy().astype(bool), id="numpy-bool"),
    pytest.param(R.long().tolist(), id="list-of-ints"),
    pytest.param([[True, False, True, False], [True] * 4], id="list-of-bools"),
])
def test_integer_and_boolean_rewards_are_accepted(rewards):
    """Integer, boolean and half-precision rewards give the same counts as a plain-Python enumeration."""
    mon = _monitor()
    mon.observe_rollout(rewards, advantages=ADV)
    report = mon.end_step()
    for key, value in _reference(R.tolist()).items():
        assert report.metrics[key] == value, key
    assert not report.violations


def test_flat_layouts_agree_with_the_2d_layout():
    """(B, G), flat + int ids, flat + string ids (interleaved) and flat + group_size give one result."""
    order = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])  # interleave the two groups
    flat, adv = R.reshape(-1)[order], ADV.reshape(-1)[order]
    ids = [0, 1] * 4
    calls = [
        dict(rewards=R, advantages=ADV),
        dict(rewards=flat, advantages=adv, group_ids=torch.tensor(ids)),
        dict(rewards=flat, advantages=adv, group_ids=[f"uid-{i}" for i in ids]),
        dict(rewards=R.reshape(-1), advantages=ADV.reshape(-1)),
    ]
    reports = []
    for kwargs in calls:
        mon = _monitor(group_size=4)
        mon.observe_rollout(**kwargs)
        reports.append(mon.end_step().metrics)
    assert all(r == reports[0] for r in reports[1:])
    assert reports[0]["grpo/groups/degenerate_rate"] == 0.5


def test_gradients_are_not_tracked():
    """Rewards and advantages that require grad are read detached: the caller's graph is untouched."""
    adv = ADV.clone().requires_grad_(True)
    mon = _monitor()
    mon.observe_rollout(R, advantages=adv)
    assert all(r.advantages.grad_fn is None for r in mon._acc.rollouts)
    assert mon.end_step().metrics["grpo/groups/total"] == 2.0


# ------------------------------------------------------------------ empty batches
@pytest.mark.parametrize("rewards, config", [
    pytest.param(torch.zeros(0, 4), {}, id="0xG"),
    pytest.param(torch.zeros(3, 0), {}, id="Bx0"),
    pytest.param(torch.zeros(0), {}, id="flat-no-ids"),
    pytest.param(torch.zeros(0), {"group_size": 4}, id="flat-group_size"),
    pytest.param([], {}, id="empty-list"),
    pytest.param(np.zeros((0, 4), dtype=np.int64), {}, id="numpy-int"),
])
def test_empty_batches_are_a_documented_no_op(rewards, config):
    """An empty batch adds nothing (documented in observe_rollout); the step still ends and advances."""
    assert "empty batch" in GRPOMonitor.observe_rollout.__doc__.lower()
    mon = _monitor(**config)
    mon.observe_rollout(rewards)
    mon.observe_generation(rewards)
    report = mon.end_step()
    assert report.metrics == {"grpo/invariants/violations": 0.0, "grpo/monitor/disabled_parts": 0.0}
    assert mon.step == 1


def test_empty_batch_arguments_are_still_checked():
    """An empty batch with misaligned advantages is still an input error, not silently ignored."""
    with pytest.raises(InputValueError, match="advantages has shape"):
        _monitor().observe_rollout(torch.zeros(0, 4), advantages=torch.zeros(3, 4))
    with pytest.raises(InputValueError, match="group_ids has 2 entries"):
        _monitor().observe_rollout(torch.zeros(0), group_ids=[0, 1])


def test_empty_batch_next_to_a_real_one_changes_nothing():
    """Adding an empty call to a step leaves its metrics exactly as without it."""
    a, b = _monitor(), _monitor()
    a.observe_rollout(R, advantages=ADV)
    b.observe_rollout(R, advantages=ADV)
    b.observe_rollout(torch.zeros(0, 4), advantages=torch.zeros(0, 4))
    assert a.end_step().metrics == b.end_step().metrics


# ------------------------------------------------------------------ breaches, not crashes
def _with(tensor: torch.Tensor, value: float) -> torch.Tensor:
    out = tensor.clone()
    out[0, 1] = value
    return out


BREACHES = [
    pytest.param(dict(rewards=R, advantages=_with(ADV, math.nan)), id="nan-advantage"),
    pytest.param(dict(rewards=R, advantages=_with(ADV, math.inf)), id="inf-advantage"),
    pytest.param(dict(rewards=R, advantages=_with(ADV, -math.inf)), id="minus-inf-advantage"),
    pytest.param(dict(rewards=_with(R, math.inf), advantages=ADV), id="inf-reward"),
    pytest.param(dict(rewards=_with(R, -math.inf)), id="minus-inf-reward-no-advantages"),
    pytest.param(dict(rewards=_with(R, math.inf), advantages=ADV, question_ids=["a", "b"]),
                 id="inf-reward-with-questions"),
]


@pytest.mark.parametrize("kwargs", BREACHES)
def test_non_finite_values_are_recorded_breaches(kwargs):
    """NaN/inf advantages and infinite rewards are a `finite` breach in the report, not an exception."""
    mon = _monitor()
    mon.observe_rollout(**kwargs)
    report = mon.end_step()
    assert "finite" in [v.invariant for v in report.violations]
    assert report.metrics["grpo/invariants/finite"] == 1.0
    assert mon.violation_counts["finite"] == 1


@pytest.mark.parametrize("kwargs", BREACHES)
def test_non_finite_values_raise_an_invariant_violation_under_raise(kwargs, tmp_path):
    """Under the default "raise" policy the same inputs raise InvariantViolation (and nothing else)."""
    mon = GRPOMonitor(MonitorConfig(strict=True, repro_dir=str(tmp_path)))
    with pytest.raises(InvariantViolation) as info:
        mon.observe_rollout(**kwargs)
        mon.end_step()
    assert "finite" in [v.invariant for v in info.value.violations]
