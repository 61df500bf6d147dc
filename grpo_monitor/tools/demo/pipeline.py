"""The demo trainer's replaceable parts: scoring, advantages, token tensors.

A :class:`Pipeline` holds the functions a GRPO trainer applies between generation and
the loss. :data:`CORRECT` is the reference implementation; each injected bug
(:mod:`grpo_monitor.tools.demo.bugs`) swaps one of them for a realistic mistake.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

#: Stabilizer added to the group std (outside the square root).
EPS = 1e-6


def grpo_advantages(rewards: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Group-standardised advantages with the population std; NaN rewards are unscorable.

    Statistics are taken in float64 and groups whose scorable rewards are all equal get
    exactly 0 (float32 rounding of a constant group's mean would otherwise leave a tiny
    std that a small ``eps`` turns into O(1) advantages). Unscorable rows are left out of
    their group's mean and std and get advantage 0. Returned in the rewards' dtype.

    >>> grpo_advantages(torch.tensor([[1., 0., 1., 0.], [1., 1., 1., 1.]], dtype=torch.float64), eps=0.0)
    tensor([[ 1., -1.,  1., -1.],
            [ 0.,  0.,  0.,  0.]], dtype=torch.float64)
    """
    r = rewards.to(torch.float64)
    valid = ~torch.isnan(r)
    n = valid.sum(dim=1, keepdim=True).clamp(min=1)
    mean = torch.where(valid, r, 0.0).sum(dim=1, keepdim=True) / n
    centered = torch.where(valid, r - mean, 0.0)
    std = torch.sqrt((centered * centered).sum(dim=1, keepdim=True) / n)
    hi = torch.where(valid, r, -torch.inf).amax(dim=1, keepdim=True)
    lo = torch.where(valid, r, torch.inf).amin(dim=1, keepdim=True)
    advantages = torch.where(hi > lo, centered / (std + eps), 0.0)
    return advantages.to(rewards.dtype if rewards.is_floating_point() else torch.float64)


def binary_rewards(correct: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Reward 1 for a correct answer, 0 otherwise (float64, shape of ``correct``)."""
    return correct.to(torch.float64)


def broadcast_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Outcome rewards: each response's advantage on every one of its tokens, ``(N, T)``."""
    return advantages.reshape(-1, 1).to(mask.dtype).expand_as(mask).contiguous()


def identity(x: torch.Tensor) -> torch.Tensor:
    return x


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """What happens to a generated batch before the loss (see module docstring).

    ``score(correct (B, G), generator) -> rewards (B, G)``; ``advantages(rewards) ->
    advantages (B, G)``; ``token_advantages(advantages, mask) -> (N, T)``;
    ``loss_mask(mask) -> mask`` as the loss (and the monitor) sees it;
    ``sampler_logprobs(logprobs) -> the old log-probs`` the sampler reports.
    """

    score: Callable[[torch.Tensor, torch.Generator], torch.Tensor] = binary_rewards
    advantages: Callable[[torch.Tensor], torch.Tensor] = grpo_advantages
    token_advantages: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = broadcast_advantages
    loss_mask: Callable[[torch.Tensor], torch.Tensor] = identity
    sampler_logprobs: Callable[[torch.Tensor], torch.Tensor] = identity


#: The reference pipeline: binary rewards, population-std advantages, broadcast tokens.
CORRECT = Pipeline()
