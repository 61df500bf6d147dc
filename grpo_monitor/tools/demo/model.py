"""The finite-group teaching model, made into a tiny policy with token-level responses.

Question ``q`` is answered correctly with probability ``sigmoid(z_q)``. A response is a
few "reasoning" tokens drawn from ``softmax(w_q)`` over a small vocabulary (their number
is drawn by the sampler, independently of the policy), then one answer token: 1 when
correct, 0 when wrong. The reward depends only on the answer token, so the per-question
success probability is exactly ``sigmoid(z_q)`` and every group is ``G`` iid Bernoulli
draws: the setting in which ``p^G + (1-p)^G`` and the seed's exact tables hold.
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass
class Rollout:
    """One generated batch: ``B`` questions x ``G`` responses, flattened question-major.

    ``tokens``, ``mask`` and ``sampler_logprobs`` are ``(B*G, T)``; the answer token sits
    at position ``lengths - 1``; padding has mask 0, token 0 and log-prob 0.
    """

    questions: torch.Tensor  # (B,) int64
    group_size: int
    tokens: torch.Tensor  # (N, T) int64
    lengths: torch.Tensor  # (N,) int64, 1..T
    mask: torch.Tensor  # (N, T) float32, 1 on the response's tokens
    correct: torch.Tensor  # (B, G) bool
    sampler_logprobs: torch.Tensor  # (N, T) float32, log-probs under the sampling policy
    success_prob: torch.Tensor  # (B,) float64, sigmoid(z_q) when the batch was sampled

    def rows(self) -> torch.Tensor:
        """The question index of every response row, ``(N,)``."""
        return self.questions.repeat_interleave(self.group_size)

    def select(self, groups: torch.Tensor) -> Rollout:
        """The sub-batch made of the given group indices (dynamic sampling keeps some groups)."""
        rows = (groups[:, None] * self.group_size + torch.arange(self.group_size)).reshape(-1)
        return Rollout(
            self.questions[groups], self.group_size, self.tokens[rows], self.lengths[rows], self.mask[rows],
            self.correct[groups], self.sampler_logprobs[rows], self.success_prob[groups],
        )

    @staticmethod
    def concat(parts: list[Rollout]) -> Rollout:
        """Groups of several rollouts in one (all share ``G`` and ``T``)."""
        fields = [f.name for f in dataclasses.fields(Rollout) if f.name != "group_size"]
        cat = {name: torch.cat([getattr(p, name) for p in parts]) for name in fields}
        return Rollout(group_size=parts[0].group_size, **cat)


class TeachingPolicy(torch.nn.Module):
    """Per-question answer logits ``z`` (K,) and reasoning-token logits ``w`` (K, V).

    >>> pol = TeachingPolicy(torch.zeros(3), vocab=4)
    >>> pol.success_prob().tolist()
    [0.5, 0.5, 0.5]
    """

    def __init__(self, z0: torch.Tensor, vocab: int = 8):
        super().__init__()
        if z0.dim() != 1 or len(z0) < 1:
            raise ValueError(f"z0 must be a 1-D tensor of K >= 1 answer logits, but got shape {tuple(z0.shape)}")
        self.z = torch.nn.Parameter(z0.detach().to(torch.float32).clone())
        self.w = torch.nn.Parameter(torch.zeros(len(z0), vocab))

    @property
    def num_questions(self) -> int:
        return len(self.z)

    def success_prob(self) -> torch.Tensor:
        """``sigmoid(z_q)`` for every question, float64, detached."""
        return torch.sigmoid(self.z.detach().double())

    @torch.no_grad()
    def sample(self, questions: torch.Tensor, group_size: int, max_len: int, gen: torch.Generator) -> Rollout:
        """``group_size`` responses to each question; lengths uniform on ``1..max_len``."""
        rows = questions.repeat_interleave(group_size)
        n = len(rows)
        lengths = torch.randint(1, max_len + 1, (n,), generator=gen)
        probs = torch.softmax(self.w[rows], dim=-1)
        filler = torch.multinomial(probs, max_len, replacement=True, generator=gen)
        p = torch.sigmoid(self.z[rows].double())
        correct = torch.rand(n, generator=gen, dtype=torch.float64) < p
        pos = torch.arange(max_len)
        mask = (pos[None, :] < lengths[:, None]).float()
        is_answer = pos[None, :] == (lengths - 1)[:, None]
        tokens = torch.where(is_answer, correct.long()[:, None], filler) * mask.long()
        partial = Rollout(questions, group_size, tokens, lengths, mask, correct.view(-1, group_size),
                          torch.zeros(n, max_len), p.view(-1, group_size)[:, 0])
        partial.sampler_logprobs = self.token_logprobs(partial)
        return partial

    def token_logprobs(self, rollout: Rollout) -> torch.Tensor:
        """Log-probability of every response token, ``(N, T)``, 0 on padding (differentiable)."""
        rows = rollout.rows()
        filler = torch.log_softmax(self.w[rows], dim=-1).gather(1, rollout.tokens)
        z = self.z[rows]
        correct = rollout.correct.reshape(-1)
        answer = torch.where(correct, torch.nn.functional.logsigmoid(z), torch.nn.functional.logsigmoid(-z))
        pos = torch.arange(rollout.tokens.shape[1])
        is_answer = pos[None, :] == (rollout.lengths - 1)[:, None]
        return torch.where(is_answer, answer[:, None], filler) * rollout.mask


def grpo_token_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip: float = 0.2,
    beta: float = 0.04,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeekMath's GRPO surrogate with the k3 KL penalty; returns (loss, per-token k3).

    Per token: ``-(min(ratio A, clip(ratio) A) - beta k3)`` with ``ratio = exp(lp - old)``
    and ``k3 = exp(ref - lp) - (ref - lp) - 1``. Reduction: sum over each response's tokens,
    mean over responses (finite-group baselines article, section 5: "sum tokens and average fixed groups").
    """
    ratio = torch.exp(logprobs - old_logprobs)
    surrogate = torch.minimum(ratio * advantages, ratio.clamp(1 - clip, 1 + clip) * advantages)
    log_ref_ratio = ref_logprobs - logprobs
    k3 = torch.exp(log_ref_ratio) - log_ref_ratio - 1
    per_token = -(surrogate - beta * k3) * mask
    return per_token.sum() / mask.shape[0], k3.detach()
