"""One rank of the 2-process gloo check of ``grpo/moe/*`` (``dist_helpers.run_ranks``).

``python dist_routing_worker.py <scenario> <outdir>`` with the torch.distributed environment set.
``mixed``: rank 0 observes its routing shard in two uneven micro-batches, rank 1 one micro-batch
without routing and one with. ``idle``: rank 1 observes no micro-batch at all. Each rank writes
the metrics and histograms of its one step to ``<outdir>/rank<r>.pt``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dist_worker import init  # noqa: E402

L, K, E = 3, 2, 6


def routing_shard(rank: int) -> dict[str, torch.Tensor]:
    """Rank ``rank``'s micro-batch tensors (6 rows on rank 0, 4 on rank 1): mask, trainer and engine top-k ids,
    the engine flipping a rank-dependent share of routes and missing some (-1)."""
    g = torch.Generator().manual_seed(17 + rank)
    b, t = 6 - 2 * rank, 5 + rank
    mask = (torch.rand(b, t, generator=g) < 0.75).float()
    a = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(b * t * L)]).reshape(b, t, L, K)
    e = a.clone()
    flip = torch.rand(b, t, L, generator=g) < 0.2 + 0.3 * rank
    e[flip] = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(int(flip.sum()))])
    e[0, :2] = -1
    return dict(mask=mask, routed_experts=a, sampler_routed_experts=e)


def main() -> None:
    import os

    from grpo_monitor import GRPOMonitor, MonitorConfig

    scenario, outdir = sys.argv[1], Path(sys.argv[2])
    rank = int(os.environ["RANK"])
    init()
    mon = GRPOMonitor(MonitorConfig(strict=True))
    x = routing_shard(rank)
    if rank == 0:
        for part in (slice(0, 1), slice(1, None)):
            mon.observe_loss(**{k: v[part] for k, v in x.items()})
    elif scenario == "mixed":
        mon.observe_loss(mask=torch.ones(2, 3), logprobs=-torch.ones(2, 3))
        mon.observe_loss(**x)
    report = mon.end_step()
    torch.save({"metrics": report.metrics, "histograms": report.histograms}, outdir / f"rank{rank}.pt")
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
