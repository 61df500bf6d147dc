"""The routing_disagreement finding on a real tiny MoE: an engine computing the same weights in bf16 keeps it closed,
an engine that goes stale mid-run or routes with another model's weights opens it."""

from __future__ import annotations

import copy
import functools
import sys
from pathlib import Path

import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from moe_lab import batch, route, stale_copy, tiny_moe  # noqa: E402

pytest.importorskip("transformers")
STEPS, STALE_FROM = 11, 5


@functools.cache
def _model(seed: int, experts: int, topk: int):
    return tiny_moe(seed, 1.0, experts, topk)  # building one takes seconds: once per module


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: threads only contend on a shared machine
    yield
    torch.set_num_threads(threads)


def _run(engine: str, experts: int, topk: int) -> tuple[list[bool], list[float]]:
    """Per step: whether the finding is open, and grpo/moe/agreement (trainer float32, engine bf16)."""
    model = _model(0, experts, topk)
    ids0, _ = batch(0, 8, 32)
    other = {"stale": lambda: stale_copy(model, ids0, 1e-4, 1), "foreign": lambda: _model(7, experts, topk)}
    lagging = copy.deepcopy(other[engine]()).to(torch.bfloat16) if engine in other else None
    synced = copy.deepcopy(model).to(torch.bfloat16)
    mon = GRPOMonitor(MonitorConfig())
    opened, agreement = [], []
    for step in range(STEPS):
        ids, mask = batch(step + 1, 4, 32)
        sampler = lagging if engine == "foreign" or (engine == "stale" and step >= STALE_FROM) else synced
        mon.observe_loss(mask=mask, routed_experts=route(model, ids, mask, torch.float32, False),
                         sampler_routed_experts=route(sampler, ids, mask, torch.bfloat16, False))
        report = mon.end_step()
        opened.append("routing_disagreement" in {f.name for f in report.health.active})
        agreement.append(report.metrics["grpo/moe/agreement"])
    return opened, agreement


@pytest.mark.parametrize("experts, topk", [(16, 4), (64, 8)], ids=["16 experts top-4", "64 experts top-8"])
def test_bf16_engine_of_the_same_weights_stays_quiet(experts, topk):
    """Numerical noise only (bf16 against float32, 2-5% of pairs differ): never opened."""
    opened, agreement = _run("synced", experts, topk)
    assert not any(opened) and min(agreement) < 1.0


@pytest.mark.parametrize("experts, topk", [(16, 4), (64, 8)], ids=["16 experts top-4", "64 experts top-8"])
def test_engine_going_stale_mid_run_opens_it(experts, topk):
    """Weights one lr=1e-4 AdamW step apart from step 6 on: open within the patience, closed before."""
    opened, agreement = _run("stale", experts, topk)
    assert not any(opened[:STALE_FROM]) and all(opened[STALE_FROM + 4:]), (opened, agreement)


def test_another_models_routing_opens_it_from_the_start():
    """Another seed's weights from step 0: agreement about 0, open at the patience (3 steps)."""
    opened, agreement = _run("foreign", 16, 4)
    assert max(agreement) < 0.05 and opened[2:] == [True] * (STEPS - 2), opened
