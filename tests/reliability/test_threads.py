"""Threads sharing one monitor (async rollout workers): every step and every group is counted once."""

from __future__ import annotations

import json
import threading

import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.sinks.jsonl import JSONLSink
from references import advantages

THREADS, STEPS_EACH, GROUPS, G = 8, 75, 8, 8


def _worker(mon: GRPOMonitor, seed: int, reports: list, start: threading.Barrier) -> None:
    gen = torch.Generator().manual_seed(seed)
    start.wait()
    for _ in range(STEPS_EACH):
        r = torch.randint(0, 2, (GROUPS, G), generator=gen).float()
        a = advantages(r, "population", 1e-6)
        mon.observe_generation(r)
        mon.observe_rollout(r, advantages=a)
        reports.append(mon.end_step())


def test_concurrent_end_steps_give_distinct_steps_and_exact_counts(tmp_path):
    """600 end_step calls from 8 threads: 600 records with 600 distinct steps and exactly 4,800 groups."""
    sink = JSONLSink(tmp_path / "monitor.jsonl")
    mon = GRPOMonitor(MonitorConfig(group_size=G, std_convention="population"), sinks=[sink])
    reports: list = []
    start = threading.Barrier(THREADS)
    threads = [threading.Thread(target=_worker, args=(mon, i, reports, start)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    mon.close()
    total = THREADS * STEPS_EACH
    assert sorted(r.step for r in reports) == list(range(total))
    assert sum(r.metrics.get("grpo/groups/total", 0.0) for r in reports) == total * GROUPS
    assert sum(r.metrics.get("grpo/sampling/generated_groups", 0.0) for r in reports) == total * GROUPS
    lines = [json.loads(x) for x in (tmp_path / "monitor.jsonl").read_text().splitlines()]
    assert sorted(x["step"] for x in lines) == list(range(total))
    assert not mon.disabled_parts and not any(r.violations for r in reports)
