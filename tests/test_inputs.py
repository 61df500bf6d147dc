"""The API boundary: accepted layouts and dtypes give the same step; bad input gets a worded error."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from grpo_monitor.step.inputs import InputTypeError, InputValueError, factorize, group_layout
from references import advantages

B, G = 12, 4


def batch():
    """Binary rewards (B, G) as float32 and their population z-scores (eps 1e-4)."""
    gen = torch.Generator().manual_seed(0)
    r = (torch.rand(B, G, generator=gen) < torch.rand(B, 1, generator=gen)).float()
    return r, advantages(r, "population", 1e-4)


def step_metrics(make_monitor, rewards, advantages, group_size=None, **kw):
    mon = make_monitor(group_size=group_size)
    mon.observe_rollout(rewards, advantages=advantages, **kw)
    report = mon.end_step()
    assert report.violations == []
    return report.metrics


@pytest.fixture
def reference(make_monitor):
    r, a = batch()
    return step_metrics(make_monitor, r, a)


def _same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-7), key


# ------------------------------------------------------------------ layouts


def _layouts():
    r, a = batch()
    perm = torch.randperm(B * G, generator=torch.Generator().manual_seed(1))
    gid = torch.arange(B).repeat_interleave(G)
    names = np.array([f"uid-{i}" for i in range(B)], dtype=object)
    return {
        "BG-tensor": (r, a, {}, None),
        "BG-numpy": (r.numpy(), a.numpy(), {}, None),
        "BG-numpy-float64": (r.double().numpy(), a.double().numpy(), {}, None),
        "flat-group-size": (r.reshape(-1), a.reshape(-1), {}, G),
        "flat-int-ids-shuffled": (r.reshape(-1)[perm], a.reshape(-1)[perm], {"group_ids": gid[perm]}, None),
        "flat-numpy-int-ids": (r.reshape(-1).numpy(), a.reshape(-1).numpy(), {"group_ids": gid.numpy() * 3 + 100},
                               None),
        "flat-string-uids-shuffled": (r.reshape(-1)[perm], a.reshape(-1)[perm],
                                      {"group_ids": names[gid[perm].numpy()]}, None),
        "flat-list-of-tuples": (r.reshape(-1), a.reshape(-1), {"group_ids": [("p", int(i)) for i in gid]}, None),
        "BG-advantages-flat": (r, a.reshape(-1), {}, None),
    }


@pytest.mark.parametrize("name", list(_layouts()))
def test_every_layout_gives_the_same_step(make_monitor, reference, name):
    """(B, G), flat + group_size, flat + int or string ids (shuffled), numpy or torch: the same metrics."""
    rewards, advantages, kw, group_size = _layouts()[name]
    _same(step_metrics(make_monitor, rewards, advantages, group_size, **kw), reference)


@pytest.mark.parametrize(
    "dtype", [torch.bool, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float64],
)
def test_reward_dtypes_are_accepted(make_monitor, reference, dtype):
    """Integer, boolean and low-precision rewards are read as numbers (0/1 rewards are exact in all)."""
    r, a = batch()
    _same(step_metrics(make_monitor, r.to(dtype), a), reference)


def test_question_ids_per_group_or_per_row(make_monitor):
    """question_ids may be one per group or one per row (the first row of each group names it)."""
    r, a = batch()
    per_group = [f"q{i}" for i in range(B)]
    per_row = [q for q in per_group for _ in range(G)]
    for ids in (per_group, per_row, np.array(per_group, dtype=object)):
        mon = make_monitor()
        mon.observe_rollout(r, advantages=a, question_ids=ids)
        assert mon.end_step().violations == []
        assert "q0" in mon._run.questions.history and len(mon._run.questions.history) == B


def test_factorize_keeps_user_labels():
    """Dense codes index the user's ids: int tensors (sorted) and hashable ids (first appearance)."""
    gid, labels = factorize(torch.tensor([7, 3, 7, 9]), 4, torch.device("cpu"))
    assert [labels[i] for i in gid.tolist()] == [7, 3, 7, 9]
    gid, labels = factorize(["b", "a", "b", "c"], 4, torch.device("cpu"))
    assert labels == ["b", "a", "c"] and gid.tolist() == [0, 1, 0, 2]


def test_dense_layouts_are_marked_as_blocks():
    """(B, G) and flat + group_size are contiguous blocks (dense reductions); ids are not."""
    assert group_layout(torch.zeros(3, 4)).segments().dense
    assert group_layout(torch.zeros(12), group_size=4).segments().dense
    assert not group_layout(torch.zeros(4), group_ids=[0, 1, 0, 1]).segments().dense


def test_empty_batch_is_a_no_op(make_monitor):
    """An empty rollout records nothing; the step reports no group metrics."""
    mon = make_monitor()
    mon.observe_rollout(torch.zeros(0, 8), advantages=torch.zeros(0, 8))
    assert "grpo/groups/total" not in mon.end_step().metrics


# ------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "call, error, words",
    [
        pytest.param(lambda m: m.observe_rollout(torch.zeros(2, 3, 4)), InputValueError, ["rewards", "3-D", "(B, G)"],
                     id="3d-rewards"),
        pytest.param(lambda m: m.observe_rollout(torch.zeros(8)), InputValueError, ["flat rewards", "group_ids",
                     "group_size"], id="flat-without-ids"),
        pytest.param(lambda m: m.observe_rollout(torch.zeros(8), group_ids=[0] * 7), InputValueError,
                     ["group_ids has 7 entries", "8 rows"], id="ids-length"),
        pytest.param(lambda m: m.observe_rollout(torch.zeros(2, 4), advantages=torch.zeros(2, 3)), InputValueError,
                     ["advantages has shape (2, 3)", "rewards has shape (2, 4)"], id="advantages-shape"),
        pytest.param(lambda m: m.observe_rollout(torch.zeros(2, 4), group_ids=[0] * 8), InputValueError,
                     ["group_ids must be None", "(B, G)"], id="ids-with-BG"),
        pytest.param(lambda m: m.observe_rollout(torch.zeros(8), group_ids=torch.zeros(8)), InputTypeError,
                     ["group_ids", "float"], id="float-ids"),
        pytest.param(lambda m: m.observe_rollout(np.array(["a", "b"])), InputTypeError, ["rewards", "numbers"],
                     id="string-rewards"),
        pytest.param(lambda m: m.observe_rollout("1,0,1"), InputTypeError, ["rewards", "str"], id="rewards-str"),
        pytest.param(lambda m: m.observe_rollout(torch.zeros(8), group_ids=[[0]] * 8), InputTypeError,
                     ["group_ids", "hashable"], id="unhashable-ids"),
        pytest.param(lambda m: m.observe_rollout(torch.zeros(2, 4), question_ids=["a"] * 3), InputValueError,
                     ["question_ids has 3 entries", "per group (2)", "per row (8)"], id="question-ids-length"),
        pytest.param(lambda m: m.observe_generation(torch.zeros(2, 4), lengths=torch.zeros(3)), InputValueError,
                     ["lengths", "rewards has shape (2, 4)"], id="lengths-shape"),
    ],
)
def test_bad_input_gets_a_worded_error(make_monitor, call, error, words):
    """Each error is an Input*Error (a ValueError/TypeError) that names the argument, expected and received."""
    with pytest.raises(error) as info:
        call(make_monitor())
    assert isinstance(info.value, ValueError if error is InputValueError else TypeError)
    for word in words:
        assert word in str(info.value)


def test_non_dividing_group_size(make_monitor):
    """Flat rewards whose length is not a multiple of config.group_size are refused."""
    with pytest.raises(InputValueError, match=r"rewards has 10 rows, not a multiple of config.group_size=4"):
        make_monitor(group_size=4).observe_rollout(torch.zeros(10))


def test_bad_input_leaves_the_monitor_usable(make_monitor):
    """After a refused call the next good step is reported normally."""
    mon = make_monitor()
    with pytest.raises(InputValueError):
        mon.observe_rollout(torch.zeros(2, 3, 4))
    r, a = batch()
    mon.observe_rollout(r, advantages=a)
    assert mon.end_step().metrics["grpo/groups/total"] == B
