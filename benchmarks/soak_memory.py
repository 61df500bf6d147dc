"""Soak test: 10,000 monitored steps keep the process's memory flat (not a test: run it by hand).

    .venv/bin/python benchmarks/soak_memory.py [--steps 10000] [--questions 50000] [--history-cap 10000]

Each step observes a generated batch and its retained live groups (retry ledger), with
question ids drawn from a pool larger than ``history_cap`` (so the per-question history
fills, then evicts), writes the report to a JSONL sink and emits the per-question table
every ``table_every`` steps. The resident set size (psutil) is printed every
``--every`` steps after a ``gc.collect()``; the last line is the growth between step
1,000 and the last step. Exit status 1 when that growth exceeds ``--max-growth-mib``.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time

import psutil
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.sinks.jsonl import JSONLSink


def make_step(gen: torch.Generator, groups: int, group_size: int, pool: int):
    """Binary rewards of ``groups`` prompts, the live ones retained with population z-scores."""
    questions = torch.randint(pool, (groups,), generator=gen).tolist()
    p = torch.rand(groups, 1, generator=gen)
    rewards = (torch.rand(groups, group_size, generator=gen) < p).float()
    keep = (rewards.amax(1) > rewards.amin(1)).nonzero().flatten()
    kept = rewards[keep]
    adv = (kept - kept.mean(1, keepdim=True)) / (kept.std(1, keepdim=True, correction=0) + 1e-6)
    return rewards, questions, kept, adv, [questions[i] for i in keep.tolist()]


def soak(args: argparse.Namespace, folder: str) -> dict[int, float]:
    """Run the steps; RSS in MiB at each checkpoint step."""
    proc, gen = psutil.Process(os.getpid()), torch.Generator().manual_seed(0)
    config = MonitorConfig(on_violation="ignore", history_cap=args.history_cap, group_size=args.group_size)
    rss: dict[int, float] = {}
    table_rows = 0
    with GRPOMonitor(config, sinks=[JSONLSink(os.path.join(folder, "soak.jsonl"), fsync=False)]) as mon:
        start = time.perf_counter()
        for step in range(1, args.steps + 1):
            rewards, questions, kept, adv, kept_q = make_step(gen, args.groups, args.group_size, args.questions)
            mon.observe_generation(rewards, question_ids=questions, lengths=torch.full(rewards.shape, 100))
            mon.observe_rollout(kept, advantages=adv, question_ids=kept_q)
            report = mon.end_step()
            table_rows = max(table_rows, len(report.tables.get("grpo/questions", [])))
            if step % args.every == 0 or step == 1:
                gc.collect()
                rss[step] = proc.memory_info().rss / 2**20
                print(f"step {step:>6}  rss {rss[step]:8.1f} MiB  history {mon.tracked_questions:>6} questions  "
                      f"largest table {table_rows:>4} rows  "
                      f"{(time.perf_counter() - start) / step * 1e3:6.2f} ms/step", flush=True)
    return rss


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=64, help="generated groups per step")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--questions", type=int, default=50_000, help="distinct question ids in the pool")
    parser.add_argument("--history-cap", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=1_000, help="steps between RSS readings")
    parser.add_argument("--max-growth-mib", type=float, default=16.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        rss = soak(args, folder)
    base = min((s for s in rss if s >= min(1_000, args.steps // 2)), default=min(rss))
    last = max(rss)
    growth = rss[last] - rss[base]
    print(f"RSS growth step {base:,} -> {last:,}: {growth:+.1f} MiB ({growth / rss[base] * 100:+.2f}%); "
          f"step 1 -> {last:,}: {rss[last] - rss[1]:+.1f} MiB")
    return 0 if growth <= args.max_growth_mib else 1


if __name__ == "__main__":
    sys.exit(main())
