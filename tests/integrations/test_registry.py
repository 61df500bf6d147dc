"""The integrations' registry and base: every registered name resolves to its module's INTEGRATION, and the
entry-point protocol written once in ``_base.EntryPoint`` attaches, steps, refuses a second attach and puts back
what it replaced, on a framework of a few lines whose entry point is a real function."""

from __future__ import annotations

import importlib
import types

import pytest
import torch

from grpo_monitor import InvariantViolation, MonitorConfig
from grpo_monitor.integrations import REGISTRY, integration
from grpo_monitor.integrations._base import EntryPoint, Integration
from grpo_monitor.integrations._entrypoint import Attachment, Call, Declared
from grpo_monitor.integrations._from_env import ENV


def _centred(rewards: torch.Tensor) -> torch.Tensor:
    """The framework's estimator: each reward minus its group's mean (groups of 2 contiguous rows)."""
    return rewards - rewards.view(-1, 2).mean(-1).repeat_interleave(2)


class _Toy(EntryPoint):
    """A framework whose ``compute(rewards)`` returns the step's advantages (the ``none`` estimator, groups of 2)."""

    def __init__(self, module: types.ModuleType, fail: bool = False):
        super().__init__("toy")
        self.module, self.fail = module, fail

    def load(self):
        return self.module

    def install(self, state: Attachment, loaded, **options) -> None:
        state.patch(loaded, "compute", lambda rewards: Call(Declared("none", group_size=2), {"rewards": rewards}),
                    self.observer(state))
        if self.fail:
            raise RuntimeError("the framework moved its entry point")

    def observe(self, state, monitor, call, out) -> None:
        monitor.observe_rollout(call.before["rewards"], group_ids=torch.arange(len(out)) // 2,
                                advantages=out if state.checks_advantages(call) else None)


@pytest.fixture
def toy():
    module = types.ModuleType("toy_framework")
    module.compute = _centred
    return module


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_registered_name_is_its_modules_integration(name):
    """``integration(name)`` is the module's INTEGRATION, of that name; an entry-point module's detach, attached and
    attach_from_env are its base's, written once."""
    found = integration(name)
    module = importlib.import_module(f"grpo_monitor.integrations.{name}")
    assert isinstance(found, Integration) and found is module.INTEGRATION and found.name == name
    if isinstance(found, EntryPoint):
        for public in ("detach", "attached", "attach_from_env"):
            assert getattr(module, public) == getattr(found, public), (name, public)


def test_an_unknown_name_is_worded():
    """A name outside the registry is a KeyError naming the registered ones."""
    with pytest.raises(KeyError, match=r"no integration named 'toy'; expected one of \['areal'"):
        integration("toy")


def test_attach_steps_refuses_a_second_attach_and_detach_restores(toy):
    """Each wrapped call is one monitor step (built at the first call from the declared estimator); a second attach
    is refused; detach puts the framework's function back and closes the monitor it built."""
    base = _Toy(toy)
    state = base.attach(None, config=MonitorConfig(group_size=2), sinks=None)
    assert base.attached() is None and toy.compute is not _centred
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    assert torch.equal(toy.compute(rewards), _centred(rewards))
    monitor = base.attached()
    assert monitor is not None and monitor.step == 1 and len(state.reports) == 1
    assert monitor.config.std_convention == "none"
    with pytest.raises(RuntimeError, match="integrations.toy is already attached"):
        base.attach(None)
    base.detach()
    assert toy.compute is _centred and base.attached() is None and monitor.closed


def test_a_breach_raises_out_of_the_entry_point(toy):
    """A framework whose advantages are not the declared estimator's (the rewards, not centred): the call raises
    InvariantViolation, before the trainer could use them."""
    toy.compute = lambda rewards: rewards.clone()
    base = _Toy(toy)
    base.attach(None, sinks=None)
    try:
        with pytest.raises(InvariantViolation):
            toy.compute(torch.tensor([1.0, 0.0, 1.0, 1.0]))
    finally:
        base.detach()


def test_a_failed_install_puts_back_what_it_replaced(toy):
    """An install that fails half-way leaves the framework as it was and the integration free to attach."""
    with pytest.raises(RuntimeError, match="moved its entry point"):
        _Toy(toy, fail=True).attach(None, sinks=None)
    assert toy.compute is _centred
    base = _Toy(toy)
    base.attach(None, sinks=None)
    base.detach()


def test_attach_from_env_reads_grpo_monitor_config(toy, monkeypatch):
    """``attach_from_env`` (Ray's setup hook) attaches with GRPO_MONITOR_CONFIG's fields and sinks; a second call
    returns the same attachment."""
    monkeypatch.setenv(ENV, '{"group_size": 2, "history_cap": 7, "sinks": []}')
    base = _Toy(toy)
    state = base.attach_from_env()
    try:
        assert state is base.attach_from_env() and state.sinks == [] and state.config.history_cap == 7
    finally:
        base.detach()
