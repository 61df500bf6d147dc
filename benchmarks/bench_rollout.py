"""Time one monitored step at 1,000,000 responses (not a test: run it by hand).

    .venv/bin/python benchmarks/bench_rollout.py [--responses 1000000] [--reps 7]

For G = 8 and G = 16 and three layouts — rewards ``(B, G)``, flat rewards with shuffled
integer group ids, flat rewards with shuffled verl-style uid strings — it times
``observe_rollout(rewards, advantages=...) + end_step()`` (median of ``reps`` runs after
one warm-up) with the default ``defer_checks=False`` (one host sync at the rollout hook,
one at the step end) and with ``defer_checks=True`` (one sync per step). ``+ledger`` adds
``observe_generation`` on the same batch (the retry ledger: the generated batch is observed
first, then the retained one): the ledger's cost is the difference with the first column.
``+ledger+questions`` also passes one question id per group (125,000 or 62,500 distinct
questions per step), which feeds the per-question history (iid-predicted degenerate rate,
overdispersion, stuck questions). Wall time depends on what else the machine runs; the
CPU time (this process, all threads) is printed beside it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid

import numpy as np
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig


def make_batch(n: int, G: int, layout: str, seed: int = 0) -> dict:
    """Binary rewards of B = n // G groups, population z-score advantages, in ``layout``."""
    gen = torch.Generator().manual_seed(seed)
    B = n // G
    p = torch.rand(B, 1, generator=gen)
    r = (torch.rand(B, G, generator=gen) < p).float()
    adv = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True, correction=0) + 1e-4)
    questions = list(range(B))
    if layout == "(B,G)":
        return dict(rewards=r, advantages=adv, question_ids=questions)
    perm = torch.randperm(B * G, generator=gen)
    gid = torch.arange(B).repeat_interleave(G)[perm]
    if layout == "flat+int ids":
        ids = gid
    else:
        uids = np.array([str(uuid.UUID(int=i)) for i in range(B)], dtype=object)
        ids = uids[gid.numpy()]
    return dict(rewards=r.reshape(-1)[perm], advantages=adv.reshape(-1)[perm], group_ids=ids, question_ids=questions)


def time_step(batch: dict, reps: int, *, defer: bool = False, ledger: bool = False, questions: bool = False):
    """Median (wall, CPU) seconds of one monitored step, after one warm-up step."""
    mon = GRPOMonitor(MonitorConfig(defer_checks=defer, table_every=10**9))
    kw = {"group_ids": batch["group_ids"]} if "group_ids" in batch else {}
    qkw = {"question_ids": batch["question_ids"]} if questions else {}
    wall, cpu = [], []
    for _ in range(reps + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        if ledger:
            mon.observe_generation(batch["rewards"], **kw, **qkw)
        mon.observe_rollout(batch["rewards"], advantages=batch["advantages"], **kw, **qkw)
        report = mon.end_step()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        assert not report.violations, report.violations
    return statistics.median(wall[1:]), statistics.median(cpu[1:])


COLUMNS = {
    "rollout+end_step": dict(),
    "deferred": dict(defer=True),
    "+ledger": dict(ledger=True),
    "+ledger+questions": dict(ledger=True, questions=True),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--responses", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--columns", default=",".join(COLUMNS), help="comma-separated subset of " + ", ".join(COLUMNS))
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    columns = args.columns.split(",")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs (load {load:.1f}), "
          f"{args.responses:,} responses per step; median of {args.reps} steps after a warm-up, "
          "milliseconds per step as wall / CPU time")
    head = f"{'G':>3} {'layout':<14}" + "".join(f"{c:>20}" for c in columns)
    print(head)
    print("-" * len(head))
    for G in (8, 16):
        for layout in ("(B,G)", "flat+int ids", "flat+str uids"):
            batch = make_batch(args.responses, G, layout)
            cells = [time_step(batch, args.reps, **COLUMNS[c]) for c in columns]
            print(f"{G:>3} {layout:<14}" + "".join(f"{w * 1e3:>11.0f} /{c * 1e3:>6.0f}" for w, c in cells), flush=True)


if __name__ == "__main__":
    main()
