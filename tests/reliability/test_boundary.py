"""The API boundary: a user's mistake is an input error, never a fault that switches checking off."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.catalog.metrics import DISABLED_PARTS_KEY as DISABLED
from grpo_monitor.step.inputs import InputTypeError, InputValueError
from references import advantages

R = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
ADV = advantages(R, "population", 1e-6)
BESSEL = advantages(R, "bessel", 1e-6)  # the real bug: a Bessel std where the trainer declares population
IDS = ["q0", "q1", "q2"]


def _monitor(**config) -> GRPOMonitor:
    """A fail-open monitor (strict=False, as users run it) that warns on breaches."""
    return GRPOMonitor(MonitorConfig(**{"on_violation": "warn", "std_convention": "population", **config}))


# ------------------------------------------------------------------ keyword names
TYPOS = [
    pytest.param("observe_rollout", (R,), dict(advantages=ADV, prompt_ids=IDS), "prompt_ids", "question_ids",
                 id="rollout-prompt_ids"),
    pytest.param("observe_rollout", (R,), dict(advantage=ADV), "advantage", "advantages", id="rollout-advantage"),
    pytest.param("observe_rollout", (R,), dict(question_id=IDS), "question_id", "question_ids",
                 id="rollout-question_id"),
    pytest.param("observe_rollout", (R.reshape(-1),), dict(uid=[0] * 4 + [1] * 4 + [2] * 4), "uid", "group_ids",
                 id="rollout-uid"),
    pytest.param("observe_generation", (R,), dict(lenghts=torch.ones(3, 4)), "lenghts", "lengths",
                 id="generation-lenghts"),
    pytest.param("observe_loss", (), dict(mask=torch.ones(3, 4), old_logprob=torch.zeros(3, 4)), "old_logprob",
                 "old_logprobs", id="loss-old_logprob"),
    pytest.param("observe_loss", (), dict(attention_mask=torch.ones(3, 4)), "attention_mask", "mask",
                 id="loss-attention_mask"),
    pytest.param("end_step", (), dict(stpe=3), "stpe", "step", id="end_step-stpe"),
    pytest.param("add_metrics", (), dict(metric={"x": 1.0}), "metric", "metrics", id="add_metrics-metric"),
]


@pytest.mark.parametrize("method, args, kwargs, wrong, right", TYPOS)
def test_an_unknown_keyword_is_a_type_error_naming_the_nearest_valid_one(method, args, kwargs, wrong, right):
    """A misspelt or foreign keyword raises TypeError naming it and the nearest valid name; nothing is disabled."""
    mon = _monitor()
    with pytest.raises(TypeError, match=f"'{wrong}'.*did you mean {right}\\?"):
        getattr(mon, method)(*args, **kwargs)
    assert not mon.disabled_parts


def test_a_keyword_added_later_to_a_signature_gets_the_same_treatment():
    """The valid names come from the method's signature, so a new keyword is suggested with no list to update."""
    from grpo_monitor.step import guard

    class Wider(GRPOMonitor):
        @guard.fail_open("rollout")
        def observe_rollout(self, rewards, *, advantages=None, reward_components=None):  # type: ignore[override]
            return None

    with pytest.raises(TypeError, match="'reward_component'.*did you mean reward_components\\?"):
        Wider(MonitorConfig()).observe_rollout(R, reward_component={"a": R})


@pytest.mark.parametrize("where, kwargs, wrong, right", [
    pytest.param("GRPOMonitor", {"sink": []}, "sink", "sinks", id="monitor-sink"),
    pytest.param("GRPOMonitor", {"cfg": MonitorConfig()}, "cfg", "config", id="monitor-cfg"),
    *[pytest.param(f"{name}.attach", {"sink": None}, "sink", "sinks", id=f"{name}-attach")
      for name in ("verl", "openrlhf", "skyrl", "areal", "trl", "hf")],
])
def test_a_misspelt_constructor_or_attach_keyword_names_the_nearest(where, kwargs, wrong, right):
    """GRPOMonitor(sink=...) and every integration's attach(sink=...) raise the user's InputTypeError (a TypeError)
    naming the call, the wrong keyword and the right one, before anything is built or patched (the framework
    need not be installed for the typo to be named)."""
    import importlib

    if where == "GRPOMonitor":
        call = GRPOMonitor
    else:
        call = importlib.import_module(f"grpo_monitor.integrations.{where.split('.')[0]}").attach
    with pytest.raises(InputTypeError, match=f"^{where}\\(\\) got an unexpected keyword argument '{wrong}'; "
                                             f"did you mean {right}\\?"):
        call(**kwargs)


@pytest.mark.parametrize("wrong, right", [("grup_size", "group_size"), ("on_violaton", "on_violation"),
                                          ("num_generations", "group_size"), ("histroy_cap", "history_cap")])
def test_a_misspelt_config_field_is_a_type_error_naming_the_nearest_field(wrong, right):
    """MonitorConfig takes keywords too: one line naming the nearest field (a trainer's name ranks first), no
    pydantic report; GRPO_MONITOR_CONFIG words the same error under its own name."""
    from grpo_monitor.integrations._from_env import settings_from_env

    with pytest.raises(TypeError, match=f"^MonitorConfig\\(\\) got an unexpected keyword argument '{wrong}'; "
                                        f"did you mean {right}\\?$"):
        MonitorConfig(**{"group_size": 4, wrong: 1})
    with pytest.raises(ValueError, match=f"GRPO_MONITOR_CONFIG holds an invalid MonitorConfig: .*'{wrong}'"):
        settings_from_env({"GRPO_MONITOR_CONFIG": f'{{"{wrong}": 1}}'})


def test_too_many_positional_arguments_and_a_missing_one_are_type_errors():
    """Positional misuse is the caller's error too: a TypeError naming the call, no part switched off."""
    mon = _monitor()
    with pytest.raises(TypeError, match="observe_rollout"):
        mon.observe_rollout(R, ADV)
    with pytest.raises(TypeError, match="observe_loss.*mask"):
        mon.observe_loss(advantages=ADV)
    assert not mon.disabled_parts


def test_the_prompt_ids_slip_leaves_checking_on_and_the_next_bug_is_caught():
    """The issue's story: a prompt_ids slip, then a real Bessel-std bug with the right names is still caught."""
    mon = _monitor()
    with pytest.raises(TypeError, match="did you mean question_ids"):
        mon.observe_rollout(R, advantages=ADV, prompt_ids=IDS)
    assert mon.end_step().metrics[DISABLED] == 0.0
    with pytest.warns(RuntimeWarning, match="convention"):
        mon.observe_rollout(R, advantages=BESSEL, question_ids=IDS)
        report = mon.end_step()
    assert "convention" in [v.invariant for v in report.violations]
    assert report.metrics[DISABLED] == 0.0 and not mon.disabled_parts


# ------------------------------------------------------------------ tensor kinds
def _sparse(t: torch.Tensor) -> torch.Tensor:
    return t.to_sparse()


def _sparse_csr(t: torch.Tensor) -> torch.Tensor:
    return t.to_sparse_csr()


def _quantized(t: torch.Tensor) -> torch.Tensor:
    return torch.quantize_per_tensor(t.float(), 0.1, 0, torch.qint8)


def _nested(t: torch.Tensor) -> torch.Tensor:
    return torch.nested.nested_tensor(list(t))


def _meta(t: torch.Tensor) -> torch.Tensor:
    return t.to("meta")


def _complex(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.complex64)


KINDS = [
    pytest.param(_sparse, "sparse", id="sparse-coo"),
    pytest.param(_sparse_csr, "sparse", id="sparse-csr"),
    pytest.param(_quantized, "quantized", id="quantized"),
    pytest.param(_nested, "nested", id="nested"),
    pytest.param(_meta, "meta", id="meta"),
    pytest.param(_complex, "complex", id="complex"),
]
CALLS = [
    pytest.param(lambda m, t: m.observe_rollout(t, advantages=ADV), "rewards", id="rollout-rewards"),
    pytest.param(lambda m, t: m.observe_rollout(R, advantages=t), "advantages", id="rollout-advantages"),
    pytest.param(lambda m, t: m.observe_rollout(R, advantages=ADV, lengths=t), "lengths", id="rollout-lengths"),
    pytest.param(lambda m, t: m.observe_generation(t), "rewards", id="generation-rewards"),
    pytest.param(lambda m, t: m.observe_loss(mask=t, advantages=ADV), "mask", id="loss-mask"),
    pytest.param(lambda m, t: m.observe_loss(mask=torch.ones(3, 4), logprobs=t), "logprobs", id="loss-logprobs"),
]


@pytest.mark.parametrize("make, kind", KINDS)
@pytest.mark.parametrize("call, argument", CALLS)
def test_an_unsupported_tensor_kind_is_an_input_type_error(make, kind, call, argument):
    """Sparse, quantized, nested, meta and complex tensors: InputTypeError naming the argument and the kinds taken."""
    mon = _monitor()
    with pytest.raises(InputTypeError) as raised:
        call(mon, make(R))
    text = str(raised.value)
    assert argument in text and kind in text and "supported: dense" in text, text
    assert not mon.disabled_parts


def test_a_sparse_slip_leaves_the_next_nan_advantage_caught():
    """After a sparse rewards tensor is refused, a NaN advantage a step later is flagged as a `finite` breach."""
    mon = _monitor()
    with pytest.raises(InputTypeError, match="sparse"):
        mon.observe_rollout(R.to_sparse(), advantages=ADV)
    mon.end_step()
    bad = ADV.clone()
    bad[0, 0] = math.nan
    with pytest.warns(RuntimeWarning, match="finite"):
        mon.observe_rollout(R, advantages=bad)
        report = mon.end_step()
    assert "finite" in [v.invariant for v in report.violations] and not mon.disabled_parts


# ------------------------------------------------------------------ group ids
BAD_IDS = [
    pytest.param([0.0] * 4 + [math.nan] * 4, id="nan-float-list"),
    pytest.param([math.nan] * 8, id="one-nan-object"),
    pytest.param([float("nan") for _ in range(8)], id="fresh-nans"),
    pytest.param(np.array([0.0] * 4 + [np.nan] * 4), id="nan-numpy-float"),
    pytest.param([np.float32("nan")] * 8, id="nan-numpy-scalar"),
]


@pytest.mark.parametrize("ids", BAD_IDS)
def test_nan_group_ids_are_an_input_error(ids):
    """NaN never equals itself, so a NaN group id cannot name a group: InputValueError naming group_ids and row."""
    mon = _monitor()
    with pytest.raises(InputValueError, match="group_ids.*NaN"):
        mon.observe_rollout(torch.rand(8), group_ids=ids)
    assert not mon.disabled_parts


def test_nan_question_ids_are_an_input_error():
    """A NaN question id would never match itself in the history: InputValueError naming question_ids."""
    mon = _monitor()
    with pytest.raises(InputValueError, match="question_ids.*NaN"):
        mon.observe_rollout(R, advantages=ADV, question_ids=["a", math.nan, "c"])


@pytest.mark.parametrize("ids", [
    pytest.param([[0]] * 8, id="lists"), pytest.param([{0: 1}] * 8, id="dicts"),
    pytest.param([{1}] * 8, id="sets"),
])
def test_unhashable_group_ids_are_an_input_error(ids):
    """Unhashable group ids: InputTypeError naming group_ids; nothing is disabled."""
    mon = _monitor()
    with pytest.raises(InputTypeError, match="group_ids"):
        mon.observe_generation(torch.rand(8), group_ids=ids)
    assert not mon.disabled_parts
