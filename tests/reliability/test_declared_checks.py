"""A check the config declares either runs or says once, as a JSONL-visible warning, which input it is missing."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.estimators import ESTIMATORS
from grpo_monitor.sinks import JSONLSink, read_jsonl
from references import advantages

R = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
ADV = advantages(R, "population", 1e-4)
COMPONENTS = torch.stack([R, torch.tensor([[0.5, 0.25, 0.0, 1.0], [0.0, 1.0, 0.75, 0.5]])], -1)
GID = np.repeat(np.arange(2), 4)
NTS = torch.from_numpy(ESTIMATORS["trl.normalize_then_sum"](COMPONENTS.reshape(8, 2).numpy(), GID)).reshape(2, 4)


def _loss_call(mon: GRPOMonitor, **given) -> None:
    lp = torch.randn(8, 3, requires_grad=True)
    args = dict(mask=torch.ones(8, 3), logprobs=lp, loss=-(ADV.reshape(-1, 1) * lp).mean())
    args.update(given)
    if args.get("old_logprobs") == "same":
        args["old_logprobs"] = lp.detach().clone()
    mon.observe_loss(**{k: v for k, v in args.items() if v is not None})


def _old(mon):
    _loss_call(mon, old_logprobs="same")


def _adv(mon):
    _loss_call(mon, advantages=ADV.reshape(-1))


def _rollout(mon, **kw):
    mon.observe_rollout(R, advantages=kw.pop("advantages", ADV), **kw)


CASES = [
    pytest.param(dict(expect_on_policy=True), lambda m: (_rollout(m), _adv(m)), lambda m: (_rollout(m), _old(m)),
                 "expect_on_policy=True", "old_logprobs=", id="expect_on_policy-without-old_logprobs"),
    pytest.param(dict(on_policy_bitwise=True), lambda m: (_rollout(m), _old(m)), None,
                 "on_policy_bitwise=True", "expect_on_policy=True", id="bitwise-without-expect_on_policy"),
    pytest.param(dict(loss_aggregation="token_mean"), lambda m: (_rollout(m), _loss_call(m)),
                 lambda m: (_rollout(m), _adv(m)), "loss_aggregation='token_mean'", "advantages=",
                 id="declared-aggregation-loss-without-advantages"),
    pytest.param(dict(std_convention="trl.normalize_then_sum"), lambda m: _rollout(m, advantages=NTS),
                 lambda m: _rollout(m, advantages=NTS, reward_components=COMPONENTS),
                 "std_convention='trl.normalize_then_sum'", "reward_components=", id="multi-reward-without-components"),
    pytest.param(dict(std_convention="length_weighted_loo"), lambda m: _rollout(m), None,
                 "std_convention='length_weighted_loo'", "lengths=", id="length-weighted-without-lengths"),
]


def _run(tmp_path, config: dict, step, steps: int = 3) -> list[dict]:
    path = tmp_path / "log.jsonl"
    mon = GRPOMonitor(MonitorConfig(group_size=4, on_violation="raise", **config), sinks=[JSONLSink(path)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for _ in range(steps):
            step(mon)
            mon.end_step()
    mon.close()
    return [v for r in read_jsonl(path) for v in r.get("violations", [])]


@pytest.mark.parametrize(("config", "missing", "complete", "declared", "argument"), CASES)
def test_missing_input_is_said_once_naming_declaration_and_argument(tmp_path, config, missing, complete, declared,
                                                                    argument):
    """Three steps without the input: one declared_check warning in the JSONL log, naming both; never raised."""
    found = [v for v in _run(tmp_path, config, missing) if v["invariant"] == "declared_check"]
    assert len(found) == 1 and found[0]["severity"] == "warning"
    assert declared in found[0]["observed"] and argument in found[0]["observed"]
    assert "did not run" in found[0]["observed"]


@pytest.mark.parametrize(("config", "missing", "complete", "declared", "argument"),
                         [c for c in CASES if c.values[2] is not None])
def test_complete_inputs_are_quiet(tmp_path, config, missing, complete, declared, argument):
    """The same declaration with its input passed: no declared_check, no violation at all."""
    assert _run(tmp_path, config, complete) == []


def test_one_warning_per_declaration_each_warned(tmp_path):
    """Two declarations missing their inputs: two records, each a RuntimeWarning of its own."""
    mon = GRPOMonitor(MonitorConfig(group_size=4, on_violation="warn", expect_on_policy=True,
                                    loss_aggregation="token_mean"))
    with pytest.warns(RuntimeWarning) as seen:
        for _ in range(2):
            _rollout(mon)
            _loss_call(mon)
            mon.end_step()
    said = [str(w.message) for w in seen if "declared_check" in str(w.message)]
    assert len(said) == 2 and any("old_logprobs=" in s for s in said) and any("advantages=" in s for s in said)


def test_permuted_rows_pass_unseen_without_components_and_are_caught_with_them(tmp_path):
    """Why the warning matters: rows permuted inside a group pass trl.normalize_then_sum without the components."""
    shuffled = NTS.clone()
    shuffled[0] = shuffled[0][[0, 3, 2, 1]]  # rows 1 and 3 of the first group swapped
    config = dict(std_convention="trl.normalize_then_sum")
    blind = _run(tmp_path, config, lambda m: _rollout(m, advantages=shuffled), steps=1)
    assert [v["invariant"] for v in blind] == ["declared_check"]
    mon = GRPOMonitor(MonitorConfig(group_size=4, on_violation="warn", **config))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _rollout(mon, advantages=shuffled, reward_components=COMPONENTS)
        assert "convention" in {v.invariant for v in mon.end_step().violations}
