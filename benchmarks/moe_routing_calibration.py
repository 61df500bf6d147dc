"""Routing agreement noise on a real tiny MoE, and what stale or foreign routing gives (not a test: run it by hand).

    .venv/bin/python benchmarks/moe_routing_calibration.py [--seeds 3] [--batch 8] [--seq 64]

A random-init Qwen2-MoE from ``transformers`` (config only, no download: 4 MoE layers, 16
experts, top-4 (``--experts``, ``--topk``), hidden 128) on CPU. Each comparison routes the same
tokens twice and feeds both top-k id tensors to a real
``GRPOMonitor.observe_loss(routed_experts=, sampler_routed_experts=)``;
the figures printed are the monitor's own ``grpo/moe/*`` keys. The trainer side is always
float32 with the whole batch; the "engine" side is:

* ``bf16``: the same weights in bfloat16 (the numerics of an inference engine);
* ``fp32 one by one``: float32, each sequence alone (another batch size: other matmul blocking);
* ``bf16 one by one``: both;
* ``stale lr=..``: float32 weights ``--steps`` AdamW steps behind (a policy lag), on a real
  loss (next-token cross-entropy on random tokens), at several learning rates;
* ``another model``: another seed's random weights (foreign routing).

Router top-k comes from ``output_router_logits=True`` (the router logits of every layer), as
the model itself takes it (top-k of the softmax). ``--sharp`` multiplies the router weights so
the router is confident, as trained routers are (random init routers are near ties).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from grpo_monitor import GRPOMonitor, MonitorConfig  # noqa: E402
from moe_lab import batch, route, stale_copy, tiny_moe  # noqa: E402


def agreement(trainer: torch.Tensor, engine: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """The monitor's grpo/moe/* keys of one comparison (a real monitor, one step)."""
    mon = GRPOMonitor(MonitorConfig())
    mon.observe_loss(mask=mask, routed_experts=trainer, sampler_routed_experts=engine)
    return {k.split("/")[-1]: v for k, v in mon.end_step().metrics.items() if k.startswith("grpo/moe/")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--lrs", default="1e-6,1e-5,1e-4,1e-3")
    ap.add_argument("--sharp", default="1,10")
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--topk", type=int, default=4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for sharp in [float(s) for s in args.sharp.split(",")]:
        rows: dict[str, list[dict[str, float]]] = {}
        for seed in range(args.seeds):
            model = tiny_moe(seed, sharp, args.experts, args.topk)
            ids, mask = batch(seed, args.batch, args.seq)
            ref = route(model, ids, mask, torch.float32, False)
            paths = {"bf16": (model, torch.bfloat16, False), "fp32 one by one": (model, torch.float32, True),
                     "bf16 one by one": (model, torch.bfloat16, True)}
            for lr in [float(x) for x in args.lrs.split(",")]:
                paths[f"stale lr={lr:g}"] = (stale_copy(model, ids, lr, args.steps), torch.float32, False)
            paths["another model"] = (tiny_moe(seed + 100, sharp, args.experts, args.topk), torch.float32, False)
            for name, (m, dtype, single) in paths.items():
                rows.setdefault(name, []).append(agreement(ref, route(m, ids, mask, dtype, single), mask))
        print(f"router scale x{sharp:g} ({args.seeds} seeds, {args.batch} x {args.seq} tokens, 4 layers, "
              f"{args.experts} experts, top-{args.topk}; stale: {args.steps} AdamW step(s)); min / mean over seeds")
        print(f"{'engine side':<20} {'agreement':>19} {'topk_overlap':>19} {'layer_min':>19}")
        for name, got in rows.items():
            cells = [f"{min(g[key] for g in got):.4f} / {statistics.fmean(g[key] for g in got):.4f}"
                     for key in ("agreement", "topk_overlap", "agreement_layer_min")]
            print(f"{name:<20} " + " ".join(f"{c:>19}" for c in cells))
        print()


if __name__ == "__main__":
    main()
