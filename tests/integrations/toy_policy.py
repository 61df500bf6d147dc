"""A toy GRPO policy for Hugging Face ``Trainer`` tests: tokens from a per-prompt table of logits.

``ToyPolicy`` holds one row of logits per (prompt, position); ``ToyGRPOTrainer`` overrides
``compute_loss`` to sample G responses per prompt, score them (fraction of token 0),
compute population z-score advantages and make the monitor's two observe calls. With
``break_at_step`` the advantages lose their centring from that optimizer step on.
"""

from __future__ import annotations

import torch
from torch import nn

from references import advantages

G, T, V = 4, 5, 6
EPS = 1e-4


class ToyPolicy(nn.Module):
    def __init__(self, prompts: int = 8):
        super().__init__()
        self.logits = nn.Parameter(torch.zeros(prompts, T, V))

    def forward(self, prompt_ids: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.logits[prompt_ids], dim=-1)  # (B, T, V)


class PromptDataset(torch.utils.data.Dataset):
    def __init__(self, n: int = 8):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"prompt_ids": torch.tensor(i)}


def grpo_batch(model: ToyPolicy, prompt_ids: torch.Tensor, generator: torch.Generator):
    """Rewards (B, G), advantages (B, G) and token tensors (B*G, T) for one micro-batch."""
    logp_all = model(prompt_ids.repeat_interleave(G))  # (B*G, T, V)
    with torch.no_grad():
        tokens = torch.multinomial(logp_all.exp().reshape(-1, V), 1, generator=generator).reshape(-1, T)
        lengths = torch.randint(1, T + 1, (len(tokens),), generator=generator)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    logp = logp_all.gather(-1, tokens[..., None]).squeeze(-1)
    rewards = (((tokens == 0).float() * mask).sum(1) / mask.sum(1)).reshape(-1, G)
    return rewards, advantages(rewards, "population", EPS), mask, logp


class ToyGRPOTrainerMixin:
    """``compute_loss`` of a GRPO step, observed by ``self.grpo_monitor``."""

    grpo_monitor = None
    break_at_step: int | None = None

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        gen = torch.Generator().manual_seed(1000 + self.state.global_step * 10 + int(inputs["prompt_ids"][0]))
        rewards, adv, mask, logp = grpo_batch(model, inputs["prompt_ids"], gen)
        if self.break_at_step is not None and self.state.global_step >= self.break_at_step:
            adv = adv + 0.5
        row_adv = adv.reshape(-1)
        self.grpo_monitor.observe_rollout(rewards, advantages=adv)
        self.grpo_monitor.observe_loss(mask=mask, advantages=row_adv, logprobs=logp.detach(),
                                       old_logprobs=logp.detach())
        loss = -(row_adv[:, None] * logp * mask).sum() / mask.sum()
        return loss
