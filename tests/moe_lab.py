"""A tiny random-init MoE (Qwen2-MoE from a config, nothing downloaded) and its routing, for calibrating the
``routing_disagreement`` finding.

``route`` gives the top-k expert ids ``(B, T, L, k)`` of every token and MoE layer from the router
logits the model returns with ``output_router_logits=True`` (top-k of their softmax, as the model
routes); ``stale_copy`` the weights some AdamW steps back (a lagging sampler). Used by
``tests/health/test_routing_finding.py`` and ``benchmarks/moe_routing_calibration.py`` (which
prints the figures in ``docs/async_moe.md``).
"""

from __future__ import annotations

import copy

import torch


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
    same = next(model.parameters()).dtype == dtype
    m = model if same else copy.deepcopy(model).to(dtype)  # the given weights stay intact
    rows = [slice(i, i + 1) for i in range(ids.shape[0])] if one_by_one else [slice(None)]
    out = []
    with torch.no_grad():
        for r in rows:
            got = m(input_ids=ids[r], attention_mask=mask[r].long(), output_router_logits=True)
            per_layer = [lg.float().reshape(ids[r].shape[0], ids.shape[1], -1) for lg in got.router_logits]
            out.append(torch.stack([lg.softmax(-1).topk(k, -1).indices for lg in per_layer], dim=2))
    return torch.cat(out)


def stale_copy(model, ids: torch.Tensor, lr: float, steps: int):
    """``model`` after ``steps`` AdamW steps on next-token cross-entropy: weights that many steps apart, as a lagging
    sampler's are from the trainer's."""
    old = copy.deepcopy(model).train()
    opt = torch.optim.AdamW(old.parameters(), lr=lr)
    for _ in range(steps):
        loss = old(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return old.eval()


def batch(seed: int, b: int, t: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 + seed)
    ids = torch.randint(0, 512, (b, t), generator=gen)
    mask = torch.ones(b, t)
    for i in range(b):  # right padding of random length (the trainer masks it out)
        mask[i, t - int(torch.randint(0, t // 4, (1,), generator=gen)):] = 0
    return ids, mask
