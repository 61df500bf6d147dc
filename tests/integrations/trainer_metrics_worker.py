"""One gloo rank of the trainer-metric audit: SkyRL's entropy reduction over this rank's shard, audited.

``python trainer_metrics_worker.py <uneven|equal> <outdir>`` under ``dist_helpers.run_ranks``. The reduction is
SkyRL's (NovaSky-AI/SkyRL@4d8da74, skyrl/backends/skyrl_train/workers/worker.py): a masked mean per micro-batch
(L943), the mean over micro-batches (``reduce_metrics``, L1077), then ``all_reduce_metrics`` averaging the ranks'
values (L1079) — gloo has no AVG, so SUM / world, the same number. Issue #1822's example: one shard of 1 token
at entropy 1.0, one of 100 tokens at 2.0 logs 1.5 where the global token mean is 201/101 = 1.99.
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
    per_micro = [float((e * m).sum() / m.sum()) for e, m in micro_batches]
    local = torch.tensor(sum(per_micro) / len(per_micro), dtype=torch.float64)
    dist.all_reduce(local, op=dist.ReduceOp.SUM)
    return float(local) / world


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
