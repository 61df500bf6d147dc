"""Routing agreement noise on a real tiny MoE, and what stale or foreign routing gives (not a test: run it by hand).

    .venv/bin/python benchmarks/moe_routing_calibration.py [--seeds 3] [--batch 8] [--seq 64]

A random-init Qwen2-MoE from ``transformers`` (config only, no download: 4 MoE layers, 16
experts, top-4 (``--experts``, ``--topk``), hidden 128) on CPU. Each comparison routes the same tokens twice and feeds both
top-k id tensors to a real ``GRPOMonitor.observe_loss(routed_experts=, sampler_routed_experts=)``;
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
import copy
import statistics

import torch

from grpo_monitor import GRPOMonitor, MonitorConfig


def tiny_moe(seed: int, sharp: float, experts: int = 16, topk: int = 4):
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    cfg = Qwen2MoeConfig(vocab_size=512, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
                         shared_expert_intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=2, num_experts=experts, num_experts_per_tok=topk, decoder_sparse_step=1,
                         max_position_embeddings=256, output_router_logits=True, attn_implementation="eager")
    torch.manual_seed(seed)
    model = Qwen2MoeForCausalLM(cfg).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.gate.weight.mul_(sharp)
    return model


def route(model, ids: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype, one_by_one: bool) -> torch.Tensor:
    """Top-k expert ids (B, T, L, k) of every token, from the router logits of each layer."""
    k = model.config.num_experts_per_tok
    m = model if dtype == torch.float32 else copy.deepcopy(model).to(dtype)  # the float32 weights stay intact
    rows = [slice(i, i + 1) for i in range(ids.shape[0])] if one_by_one else [slice(None)]
    out = []
    with torch.no_grad():
        for r in rows:
            got = m(input_ids=ids[r], attention_mask=mask[r].long(), output_router_logits=True)
            per_layer = [lg.float().reshape(ids[r].shape[0], ids.shape[1], -1) for lg in got.router_logits]
            out.append(torch.stack([lg.softmax(-1).topk(k, -1).indices for lg in per_layer], dim=2))
    return torch.cat(out)


def stale_copy(model, ids: torch.Tensor, lr: float, steps: int):
    """``model`` ``steps`` AdamW steps on next-token cross-entropy back: the weights a lagging sampler holds."""
    old = copy.deepcopy(model).train()
    opt = torch.optim.AdamW(old.parameters(), lr=lr)
    for _ in range(steps):
        loss = old(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return old.eval()


def agreement(trainer: torch.Tensor, engine: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """The monitor's grpo/moe/* keys of one comparison (a real monitor, one step)."""
    mon = GRPOMonitor(MonitorConfig())
    mon.observe_loss(mask=mask, routed_experts=trainer, sampler_routed_experts=engine)
    return {k.split("/")[-1]: v for k, v in mon.end_step().metrics.items() if k.startswith("grpo/moe/")}


def batch(seed: int, b: int, t: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 + seed)
    ids = torch.randint(0, 512, (b, t), generator=gen)
    mask = torch.ones(b, t)
    for i in range(b):  # right padding of random length (the trainer masks it out)
        mask[i, t - int(torch.randint(0, t // 4, (1,), generator=gen)):] = 0
    return ids, mask


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
