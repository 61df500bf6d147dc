"""Time the run-health layer per step with a large per-question history (not a test: run it by hand).

    .venv/bin/python benchmarks/bench_health.py [--questions 100000] [--groups 256] [--steps 200]

A :class:`~grpo_monitor.run.history.QuestionHistory` is filled with ``--questions`` distinct questions, then each
step folds ``--groups`` groups into it (the monitor's existing per-question work, timed apart) and the health
layer evaluates the step as the monitor does (:meth:`LiveHealth.evaluate`: every rule of the catalogue on a full
report's metrics, the supply classes, the step's question classes). Printed: the median and p99 microseconds per
step of the health layer (goal: <= 1 ms with 10^5 questions in history), the history fold beside it, and the
cost of writing ``questions.json`` for the whole history (the JSONL sink does it every 50 steps and at the end).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from grpo_monitor import MonitorConfig
from grpo_monitor.catalog.metrics import METRICS
from grpo_monitor.health.live import LiveHealth
from grpo_monitor.report import StepReport
from grpo_monitor.run.history import QuestionHistory
from grpo_monitor.sinks.snapshots import RunSnapshots


def _metrics(rng: np.random.Generator) -> dict[str, float]:
    """A value for every catalogued scalar (the size of a full report), plausible where the rules read."""
    out = {k: float(rng.random()) for k, m in METRICS.items() if m.kind == "scalar" and not k.startswith("grpo/health")}
    out.update({"grpo/groups/total": 256.0, "grpo/groups/effective_prompts": float(rng.integers(80, 200)),
                "grpo/tokens/valid": 50_000.0, "grpo/entropy/mean": 1.0 + 0.1 * rng.random()})
    return out


def _fold(history: QuestionHistory, step: int, ids: list[int], rng: np.random.Generator) -> None:
    n = len(ids)
    kinds = rng.integers(0, 4, n).astype(np.int8)
    history.update(step, ids, rng.integers(0, 9, n).astype(float), np.full(n, 8), np.zeros(n, bool), rng.random(n),
                   kinds=kinds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=100_000)
    parser.add_argument("--groups", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    config = MonitorConfig(group_size=8, history_cap=max(args.questions, 1))
    history = QuestionHistory(config.history_cap, config.stuck_after, config.success_halflife)
    for start in range(0, args.questions, 10_000):
        _fold(history, 0, list(range(start, min(start + 10_000, args.questions))), rng)
    health, fold_us, health_us = LiveHealth(config), [], []
    for step in range(1, args.steps + 1):
        ids = rng.integers(0, args.questions, args.groups).tolist()
        report = StepReport(step, _metrics(rng))
        t0 = time.perf_counter()
        _fold(history, step, ids, rng)
        t1 = time.perf_counter()
        health.evaluate(report, history)
        health_us.append((time.perf_counter() - t1) * 1e6)
        fold_us.append((t1 - t0) * 1e6)
    snapshots = RunSnapshots(Path(tempfile.mkdtemp()), questions_every=1)
    classes = history.classes()
    t0 = time.perf_counter()
    snapshots.update(StepReport(args.steps, {}, question_classes=classes))
    write_ms = (time.perf_counter() - t0) * 1e3
    p99 = float(np.percentile(health_us, 99))
    print(f"bench_health: {len(history)} questions in history, {args.groups} groups per step, {args.steps} steps")
    print(f"  health layer per step: median {statistics.median(health_us):.0f} us, p99 {p99:.0f} us "
          f"(goal <= 1000 us)")
    print(f"  history fold per step (existing per-question work, for scale): median {statistics.median(fold_us):.0f} us")
    print(f"  questions.json of the whole history: {write_ms:.1f} ms per write (every 50 steps and at the end)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
