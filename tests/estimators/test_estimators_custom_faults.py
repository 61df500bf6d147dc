"""Your own estimator raising anything is your error naming the function and its exception, never a monitor fault."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.catalog.metrics import DISABLED_PARTS_KEY as DISABLED
from grpo_monitor.sinks import read_jsonl
from grpo_monitor.tools.scan import scan_rollouts
from references import advantages

R = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.5, 1.0, 0.0]])
ADV = advantages(R, "population", 1e-6)


def _raises_runtime(r):
    raise RuntimeError("CUDA out of memory (pretend)")


def _raises_key(r):
    return {"a": r}["advantages"]


def _divides_by_zero(r):
    return r / (1 // int(r.numel() == 0))


def _population(r):
    c = r - r.mean(1, keepdim=True)
    return c / ((c * c).mean(1, keepdim=True).sqrt() + 1e-6)


FAILING = [
    pytest.param(_raises_runtime, "RuntimeError", id="RuntimeError"),
    pytest.param(_raises_key, "KeyError", id="KeyError"),
    pytest.param(_divides_by_zero, "ZeroDivisionError", id="ZeroDivisionError"),
]


@pytest.mark.parametrize(("fn", "kind"), FAILING)
def test_failing_function_is_reported_naming_it_and_its_exception(fn, kind):
    """Three steps of a raising function: each a convention error naming it, nothing switched off, no fault."""
    mon = GRPOMonitor(MonitorConfig(std_convention=fn, on_violation="warn"))
    for _ in range(3):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            mon.observe_rollout(R, advantages=ADV)
            report = mon.end_step()
        assert not [w for w in seen if "internal error" in str(w.message)]
        assert report.metrics[DISABLED] == 0.0
        (v,) = report.violations
        assert v.invariant == "convention" and v.severity == "error"
        assert fn.__qualname__ in v.observed and kind in v.observed
        assert "your own estimator function raised" in v.hint


def test_working_function_is_quiet():
    """The same path with a correct function: no violation (the reference is a float64 population z-score)."""
    mon = GRPOMonitor(MonitorConfig(std_convention=_population, on_violation="raise"))
    mon.observe_rollout(R, advantages=ADV)
    assert mon.end_step().violations == []


def test_scan_names_the_function_and_its_exception(tmp_path):
    """scan --estimator MODULE:FUNCTION: the log's violation names the function and the exception; no part off."""
    module = tmp_path / "mine_broken.py"
    module.write_text("def z(r):\n    raise ZeroDivisionError('std of an empty group')\n")
    path = tmp_path / "rollouts.jsonl"
    rows = [{"step": s, "prompt_id": g, "reward": float(r), "advantage": float(a)}
            for s in range(2) for g in range(3) for r, a in zip(R[g].tolist(), ADV[g].tolist(), strict=True)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = scan_rollouts(path, tmp_path / "scan", quiet=True, group_size=4, report=False, tensorboard=False,
                           estimator=f"{module}:z")
    assert not result.disabled
    texts = [v["observed"] for r in read_jsonl(result.log) for v in r.get("violations", [])]
    assert texts and all("mine_broken.z raised ZeroDivisionError: std of an empty group" in t for t in texts)
