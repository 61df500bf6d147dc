"""One rank of the 2-process gloo check of ``grpo/seq_ratio/*`` and ``grpo/offpolicy/*`` (``dist_helpers.run_ranks``).

``python dist_seq_ratio_worker.py <unused> <outdir>`` with the torch.distributed environment set.
Each rank observes its shard (``seq_ratio_shard``) in two uneven micro-batches and writes the
metrics of its one step to ``<outdir>/rank<r>.pt``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dist_worker import init  # noqa: E402

G, T = 4, 13
CLIP = (0.1, 0.15)
TRAINED = 7


def seq_ratio_shard(rank: int) -> dict[str, torch.Tensor]:
    """Rank ``rank``'s rows (8 on rank 0, 12 on rank 1): rewards (groups, G) and float64 token tensors whose row
    means of logprobs - old_logprobs spread over rank-dependent ranges (rank 1 holds the extremes)."""
    g = torch.Generator().manual_seed(91 + rank)
    b = 8 + 4 * rank
    lengths = torch.randint(1, T + 1, (b,), generator=g)
    lengths[0] = 1
    mask = (torch.arange(T)[None] < lengths[:, None]).double()
    old = -torch.rand(b, T, generator=g, dtype=torch.float64) * 3
    shift = torch.linspace(-0.3 - 2 * rank, 0.3 + 3 * rank, b, dtype=torch.float64)[:, None]
    lp = old + shift + 0.05 * torch.randn(b, T, generator=g, dtype=torch.float64)
    rewards = (torch.rand(b // G, G, generator=g) < 0.5).double()
    versions = TRAINED - torch.randint(0, 3 + 3 * rank, (b // G, G), generator=g)  # rank 1 holds the oldest rows
    gen_rewards = (torch.rand(3 + rank, G, generator=g) < 0.5).double()  # generated: 3 or 4 groups
    dropped = (torch.arange(gen_rewards.numel()) % 3 != 1).reshape(gen_rewards.shape)
    gen_lengths = torch.randint(1, 50, gen_rewards.shape, generator=g).double()
    return dict(rewards=rewards, mask=mask, logprobs=lp, old_logprobs=old, policy_version=versions,
                gen_rewards=gen_rewards, dropped=dropped, gen_lengths=gen_lengths)


def main() -> None:
    import os

    from grpo_monitor import GRPOMonitor, MonitorConfig

    outdir = Path(sys.argv[2])
    rank = int(os.environ["RANK"])
    init()
    mon = GRPOMonitor(MonitorConfig(group_size=G, strict=True, clip_range=CLIP,
                                    policies={"on_policy": "ignore"}))
    x = seq_ratio_shard(rank)
    mon.observe_generation(x["gen_rewards"], lengths=x["gen_lengths"], dropped=x["dropped"])
    mon.observe_rollout(x["rewards"], policy_version=x["policy_version"], trained_version=TRAINED)
    for part in (slice(0, 3), slice(3, None)):
        mon.observe_loss(**{k: x[k][part] for k in ("mask", "logprobs", "old_logprobs")})
    torch.save({"metrics": mon.end_step().metrics}, outdir / f"rank{rank}.pt")
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
