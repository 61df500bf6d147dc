"""One gloo rank of the trainer-metric audit: SkyRL's entropy reduction over this rank's shard, audited.

``python trainer_metrics_worker.py <uneven|equal> <outdir>`` under ``dist_helpers.run_ranks``. The reduction is
SkyRL's (NovaSky-AI/SkyRL@4d8da74, skyrl/backends/skyrl_train/workers/worker.py: a masked mean per micro-batch,
L943; ``worker_utils.reduce_metrics``, L1077: the mean over micro-batches; ``worker_utils.all_reduce_metrics``,
L1079: ``strategy.all_reduce(op="mean")``, which divides by the world size and all-reduces a SUM). The installed
skyrl 0.3.0 (its framework venv) has the same three functions, but ``DistributedStrategy.all_reduce`` moves a CPU
tensor to CUDA first, so it cannot run on these CPU gloo ranks: its arithmetic is mirrored here line for line.
Issue #1822's example: one shard of 1 token at entropy 1.0, one of 100 tokens at 2.0 logs 1.5 where the global
token mean is 201/101 = 1.99.
"""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from grpo_monitor import GRPOMonitor, MonitorConfig

SHARDS = {"uneven": ((1, 1.0), (100, 2.0)), "equal": ((50, 1.0), (50, 2.0))}  # (tokens, entropy) per rank


def skyrl_policy_entropy(micro_batches: list[tuple[torch.Tensor, torch.Tensor]], world: int) -> float:
    """SkyRL's logged ``policy_entropy``: masked mean per micro-batch, mean over them, mean over ranks."""
    per_micro = [float((e * m).sum() / m.sum()) for e, m in micro_batches]  # worker.py L943
    local = torch.Tensor([sum(per_micro) / len(per_micro)])  # reduce_metrics: the mean over micro-batches
    local /= world  # strategy.all_reduce(op="mean"): divide, then all-reduce a SUM
    dist.all_reduce(local, op=dist.ReduceOp.SUM)
    return float(local)


def main() -> None:
    scenario, outdir = sys.argv[1], Path(sys.argv[2])
    timeout = datetime.timedelta(seconds=int(os.environ.get("GRPO_MONITOR_DIST_TIMEOUT", "60")))
    dist.init_process_group("gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    tokens, value = SHARDS[scenario][rank]
    mask, entropy = torch.ones(1, tokens), torch.full((1, tokens), value)
    mon = GRPOMonitor(MonitorConfig(group_size=2, strict=True))
    mon.observe_loss(mask=mask, entropy=entropy)
    logged = skyrl_policy_entropy([(entropy, mask)], world)
    mon.audit_trainer_metrics("SkyRL", {"policy_entropy": logged}, world_size=world)
    report = mon.end_step()
    result = {"rows": report.trainer_metrics, "violations": [v.to_dict() for v in report.violations],
              "mismatched": report.metrics.get("grpo/trainer_metrics/mismatched")}
    torch.save(result, outdir / f"rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
