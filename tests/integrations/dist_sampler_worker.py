"""One rank of the 2-process gloo check of the sampler's side (started by ``dist_helpers.run_ranks``).

``python dist_sampler_worker.py <unused> <outdir>`` with the torch.distributed environment set.
Each rank observes its shard (``sampler_shard``) in two micro-batches and writes the metrics of
its one step to ``<outdir>/rank<r>.pt``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dist_worker import init  # noqa: E402

G, GROUPS, T = 4, 3, 11


def sampler_shard(rank: int) -> dict[str, torch.Tensor]:
    """Rank ``rank``'s rows: rewards (GROUPS, G), lengths, truncation flags and token tensors (float64)."""
    g = torch.Generator().manual_seed(77 + rank)
    b = GROUPS * G
    rewards = (torch.rand(GROUPS, G, generator=g) < 0.5).double()
    rewards[0] = float(rank)  # one degenerate group per rank: all-failed on rank 0, all-solved on rank 1
    lengths = torch.randint(0, T + 1, (b,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).double()
    sampler = -torch.rand(b, T, generator=g, dtype=torch.float64) * 3
    old = sampler + torch.randn(b, T, generator=g, dtype=torch.float64) * (0.02 + 0.1 * rank)
    entropy = torch.rand(b, T, generator=g, dtype=torch.float64)
    return dict(rewards=rewards, lengths=lengths, truncated=lengths == T, mask=mask, sampler_logprobs=sampler,
                old_logprobs=old, logprobs=old.clone(), entropy=entropy)


def main() -> None:
    import os

    from grpo_monitor import GRPOMonitor, MonitorConfig

    outdir = Path(sys.argv[2])
    rank = int(os.environ["RANK"])
    init()
    mon = GRPOMonitor(MonitorConfig(group_size=G, strict=True, policies={"mismatch": "ignore"}))
    x = sampler_shard(rank)
    mon.observe_rollout(x["rewards"], lengths=x["lengths"], truncated=x["truncated"])
    half = len(x["mask"]) // 2
    tokens = ("mask", "sampler_logprobs", "old_logprobs", "logprobs", "entropy")
    for part in (slice(0, half), slice(half, None)):
        mon.observe_loss(**{k: x[k][part] for k in tokens})
    torch.save({"metrics": mon.end_step().metrics}, outdir / f"rank{rank}.pt")
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
