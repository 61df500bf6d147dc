"""grpo-monitor under torch.distributed: 2 CPU processes (gloo), each observing its own shard.

Each rank holds 4 of the 8 groups of a step (``rollout_scope="local"``, the default).
``end_step()`` reduces sums, counts, minima and maxima across ranks in ONE collective, so
every rank gets the metrics of the union, and only rank 0 writes to the sinks. At step 2
rank 1 alone hands over advantages that are not centred: the breach raises
``InvariantViolation`` on BOTH ranks, so no rank is left waiting in a collective.
When every rank already holds the gathered rollout (as in TRL), use
``rollout_scope="global"``. Run: ``python examples/distributed_example.py``.
"""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig
from grpo_monitor.sinks import JSONLSink
from grpo_monitor.tools.reporting import log_digest

G, GROUPS_PER_RANK, WORLD = 4, 4, 2


def shard(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's (4, G) binary rewards and population z-score advantages."""
    gen = torch.Generator().manual_seed(100 * step + rank)
    rewards = (torch.rand(GROUPS_PER_RANK, G, generator=gen) < 0.5).float()
    adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, correction=0, keepdim=True) + 1e-4)
    if step == 2 and rank == 1:
        adv = adv + 0.5  # the bug lives on one rank only
    return rewards, adv


def worker(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=timedelta(seconds=60))
    config = MonitorConfig(group_size=G, estimator="population", repro_dir=os.path.join(out, "repro"))
    monitor = GRPOMonitor(config, sinks=[JSONLSink(Path(out) / f"grpo-rank{rank}.jsonl")])
    try:
        for step in range(4):
            rewards, adv = shard(step, rank)
            monitor.observe_rollout(rewards, advantages=adv)
            m = monitor.end_step().metrics
            if rank == 0:
                print(f"step {step}: {m['grpo/groups/total']:.0f} groups over {WORLD} ranks, "
                      f"degenerate rate {m['grpo/groups/degenerate_rate']:.3f}")
    except InvariantViolation as exc:
        print(f"rank {rank} stopped at step {monitor.step - 1} by {[v.invariant for v in exc.violations]}")
    finally:
        monitor.close()
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the run's files (default: a temporary folder, removed at the end)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="grpo-dist-") as scratch:
        out = args.out or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(worker, args=(port, str(out)), nprocs=WORLD, join=True)
        written = sorted(p.name for p in out.glob("*.jsonl"))
        print(f"sink files: {written} (rank 0 only)")
        print("\n".join(log_digest(out / "grpo-rank0.jsonl")))  # the monitor's words and severities
        if not args.out:
            print("files removed with their temporary folder (pass --out DIR to keep them)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
