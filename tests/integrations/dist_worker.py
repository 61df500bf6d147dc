"""One rank of a 2-process gloo scenario (started by ``dist_helpers.run_ranks``).

``python dist_worker.py <scenario>[,<scenario>...] <outdir>`` with ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` set. The scenarios run one after the other in the same
process group (``late_init`` first: it builds its monitor before the group exists). Writes
``<outdir>/rank<r>.pt``: per scenario, the metrics of every report and the invariants of
the ``InvariantViolation`` raised, if any; rank 0 of each scenario writes
``<scenario>-rank0.jsonl``.
"""

from __future__ import annotations

import datetime
import math
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for the shared references when run as a script
from references import population_of_groups  # noqa: E402

G = 4
GROUPS_PER_RANK = 4
T = 5
WORLD_SIZE_DEFAULT = 2


def population_advantages(rewards: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """(r - mean) / (population std + eps) per row of a (B, G) table, NaN rows excluded and set to 0 (float64)."""
    B, width = rewards.shape
    rows = [list(range(i * width, (i + 1) * width)) for i in range(B)]
    adv = population_of_groups(rewards.double().reshape(-1).tolist(), rows, eps)
    return torch.tensor(adv, dtype=torch.float64).reshape(B, width)


def shard(step: int, rank: int, world: int) -> dict[str, torch.Tensor]:
    """Rank ``rank``'s part of step ``step``'s rollout: (4, G) rewards, advantages, token tensors."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    rewards = (torch.rand(GROUPS_PER_RANK, G, generator=g) < 0.3 + 0.2 * rank).double()
    rewards[0] = 1.0 if rank == 0 else 0.0  # one degenerate group per rank
    rewards[1, 0] = math.nan  # one unscorable row per rank
    adv = population_advantages(rewards)
    b = GROUPS_PER_RANK * G
    lens = torch.randint(1, T + 1, (b,), generator=g)
    mask = (torch.arange(T)[None, :] < lens[:, None]).double()
    logp = -torch.rand(b, T, generator=g, dtype=torch.float64) * (1 + rank)
    ref = logp + 0.1 * torch.randn(b, T, generator=g, dtype=torch.float64)
    return dict(rewards=rewards, advantages=adv, mask=mask, token_adv=adv.reshape(-1, 1).expand(b, T).clone(),
                logprobs=logp, ref_logprobs=ref, old_logprobs=logp.clone())


def questions(step: int, rank: int) -> list[str]:
    """Question ids of a rank's groups: shared across ranks and steps, so the history merges them."""
    return [f"q{(step + rank + i) % 5}" for i in range(GROUPS_PER_RANK)]


def union_questions(step: int, world: int) -> list[str]:
    return [q for r in range(world) for q in questions(step, r)]


def union(step: int, world: int) -> dict[str, torch.Tensor]:
    """All ranks' shards of ``step`` concatenated, in rank order."""
    parts = [shard(step, r, world) for r in range(world)]
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}


def has_tokens() -> bool:
    import importlib.util

    return importlib.util.find_spec("grpo_monitor.stats.tokens") is not None


def observe(mon, data: dict[str, torch.Tensor], tokens: bool, question_ids: list[str] | None = None) -> None:
    if question_ids is not None:  # dynamic sampling's ledger too; every generated group retained
        mon.observe_generation(data["rewards"], question_ids=question_ids)
    mon.observe_rollout(data["rewards"], advantages=data["advantages"], question_ids=question_ids)
    if tokens:
        mon.observe_loss(mask=data["mask"], advantages=data["token_adv"], logprobs=data["logprobs"],
                         ref_logprobs=data["ref_logprobs"], old_logprobs=data["old_logprobs"])


def observe_weights(mon, data: dict[str, torch.Tensor], rows: torch.Tensor | None = None, share: float = 1.0) -> None:
    """``observe_loss(loss=)`` of a shard's token-mean loss (its own token count), times ``share``."""
    lp = data["logprobs"].clone().requires_grad_(True)
    loss = -(data["token_adv"] * lp * data["mask"]).sum() / data["mask"].sum() * share
    mon.observe_loss(mask=data["mask"], advantages=data["token_adv"], logprobs=lp, loss=loss, rows=rows)


def per_group_view(report) -> dict:
    """What a report says group by group: histograms, stuck questions, the per-question table."""
    return {"histograms": report.histograms, "flagged": list(report.flagged_questions), "tables": report.tables}


def scenario(name: str, rank: int, world: int, outdir: Path) -> dict:
    """Run one scenario on this rank; the metrics of each step and what was raised."""
    from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig
    from grpo_monitor.sinks import JSONLSink

    tokens = has_tokens()
    cfg = dict(group_size=G, std_convention="population", strict=True, repro_dir=str(outdir / "repro"))
    if name == "deferred_breach":
        cfg["defer_checks"] = True
    if name in ("global", "weights_global"):
        cfg["rollout_scope"] = "global"
    if name == "questions":
        cfg.update(table_every=1, stuck_after=1)
    if name.startswith("weights"):
        cfg["loss_aggregation"] = "token_mean"
    sinks = [JSONLSink(outdir / f"{name}-rank{rank}.jsonl")]
    if name == "late_init":  # built before the process group exists
        mon = GRPOMonitor(MonitorConfig(**cfg), sinks=sinks)
        init()
    else:
        init()
        mon = GRPOMonitor(MonitorConfig(**cfg), sinks=sinks)
    out: dict = {"metrics": [], "per_group": [], "raised": None, "tokens": tokens}
    try:
        for step in range(2):
            data = shard(step, rank, world)
            if name == "global":  # every rank holds the gathered rollout; token tensors stay per rank
                full = union(step, world)
                data.update(rewards=full["rewards"], advantages=full["advantages"])
            if name == "empty_shard" and rank == 1 and step == 1:
                data = {k: v[:0] for k, v in data.items()}
            if name in ("eager_breach", "deferred_breach") and rank == 1 and step == 1:
                data["advantages"] = data["advantages"] + 0.5  # nonzero group means on rank 1 only
            if name == "token_breach" and rank == 1 and step == 1:
                data["token_adv"][:, -1] += 1.0  # advantage not constant along rows
            with_tokens = tokens and data["rewards"].numel() > 0 and not (name == "tokens_rank0" and rank == 1)
            if name == "weights":  # each rank's own loss; the token-weight shares are over every rank's rows
                mon.observe_rollout(data["rewards"], advantages=data["advantages"])
                observe_weights(mon, data)
            elif name == "weights_global":  # every rank holds the gathered rollout; its loss rows index into it
                full = union(step, world)
                mon.observe_rollout(full["rewards"], advantages=full["advantages"])
                b = data["mask"].shape[0]
                observe_weights(mon, data, rows=torch.arange(b) + rank * b)
            else:
                observe(mon, data, with_tokens, questions(step, rank) if name == "questions" else None)
            report = mon.end_step()
            out["metrics"].append(report.metrics)
            out["per_group"].append(per_group_view(report))
    except InvariantViolation as exc:
        out["raised"] = sorted({v.invariant for v in exc.violations})
    mon.close()
    return out


def init() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        return
    timeout = datetime.timedelta(seconds=int(os.environ.get("GRPO_MONITOR_DIST_TIMEOUT", "60")))
    dist.init_process_group("gloo", timeout=timeout)


def main() -> None:
    names, outdir = sys.argv[1].split(","), Path(sys.argv[2])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    result = {name: scenario(name, rank, world, outdir) for name in names}
    torch.save(result, outdir / f"rank{rank}.pt")
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
