"""Known GRPO implementation bugs, each as a swap of one part of the demo's pipeline.

``grpo-monitor demo --inject-bug NAME`` reruns the demo with one of these and shows the
monitor stopping the run with a worded :class:`~grpo_monitor.InvariantViolation`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from .pipeline import CORRECT, EPS, Pipeline, grpo_advantages


@dataclasses.dataclass(frozen=True)
class Bug:
    """A named bug: what it does, which invariants catch it, and how it changes the pipeline."""

    name: str
    summary: str
    invariants: tuple[str, ...]
    apply: Callable[[Pipeline], Pipeline]


def _wrong_axis(rewards: torch.Tensor) -> torch.Tensor:
    """Statistics over the prompt axis (dim 0) instead of the group axis."""
    mean = rewards.mean(dim=0, keepdim=True)
    return (rewards - mean) / (rewards.std(dim=0, keepdim=True, correction=0) + EPS)


def _bessel(rewards: torch.Tensor) -> torch.Tensor:
    """torch.std's default (Bessel, divide by G-1) where the population std was declared."""
    return (rewards - rewards.mean(dim=1, keepdim=True)) / (rewards.std(dim=1, keepdim=True) + EPS)


def _misaligned(rewards: torch.Tensor) -> torch.Tensor:
    """Advantages right, but shifted by one row against the rewards (an off-by-one after a sort)."""
    return grpo_advantages(rewards).reshape(-1).roll(1).reshape(rewards.shape)


def _interleaved(rewards: torch.Tensor) -> torch.Tensor:
    """Rows produced response-major (r_0 of every prompt, then r_1, ...) grouped with a contiguous view."""
    b, g = rewards.shape
    generated_order = rewards.t().reshape(-1)  # what an interleaving sampler hands back
    wrong_groups = generated_order.view(b, g)  # the bug: view(-1, G) over interleaved rows
    return grpo_advantages(wrong_groups).reshape(g, b).t()


def _sign_flip(rewards: torch.Tensor) -> torch.Tensor:
    """The advantage enters with the wrong sign (a loss negated twice)."""
    return -grpo_advantages(rewards)


def _partial_credit(correct: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Non-dyadic rewards (0.7 correct, 0.2 wrong), as a rubric or a format bonus gives, in float32."""
    return torch.where(correct, 0.7, 0.2).to(torch.float32)


def _float32_tiny_eps(rewards: torch.Tensor) -> torch.Tensor:
    """Float32 statistics with a 1e-8 stabilizer: a constant group's rounded std is ~1e-8, not 0."""
    r = rewards.to(torch.float32)
    mean = r.mean(dim=1, keepdim=True)
    return (r - mean) / (r.std(dim=1, keepdim=True, correction=0) + 1e-8)


def _flaky_verifier(correct: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Binary rewards, but 5% of responses are unscorable (verifier timeout): NaN."""
    rewards = correct.to(torch.float64)
    return torch.where(torch.rand(correct.shape, generator=gen, dtype=torch.float64) < 0.05, torch.nan, rewards)


def _nan_as_zero(rewards: torch.Tensor) -> torch.Tensor:
    """Unscorable rewards counted as 0 in the group statistics and in the advantage."""
    return grpo_advantages(torch.nan_to_num(rewards, nan=0.0))


def _token_shift(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token advantages shifted by one position: each row's first token gets the previous row's value."""
    full = advantages.reshape(-1, 1).to(mask.dtype).expand_as(mask)
    return full.reshape(-1).roll(1).reshape(mask.shape)


def _length_weighted_mask(mask: torch.Tensor) -> torch.Tensor:
    """The mask pre-divided by response length (a length-normalisation folded into it)."""
    return mask / mask.sum(dim=1, keepdim=True).clamp(min=1)


def _stale_sampler(logprobs: torch.Tensor) -> torch.Tensor:
    """The sampler's weights lag the trainer's: its log-probs differ by ~0.5 nats a token (k3 ~0.12 nats, far
    above the ~2e-4 a bfloat16 engine gives; docs/mismatch.md), not by the noise of another numerical path."""
    gen = torch.Generator(device=logprobs.device).manual_seed(int(logprobs.numel()))
    noise = torch.randn(logprobs.shape, generator=gen, device=logprobs.device, dtype=logprobs.dtype)
    return logprobs + 0.5 * noise


def _swap(**parts) -> Callable[[Pipeline], Pipeline]:
    return lambda pipeline: dataclasses.replace(pipeline, **parts)


BUGS: dict[str, Bug] = {b.name: b for b in (
    Bug("wrong_axis", "mean and std taken over the prompt axis (dim=0) instead of the group axis",
        ("zero_group_mean", "affine_in_rewards"), _swap(advantages=_wrong_axis)),
    Bug("bessel", "torch.std's default Bessel correction where the population std is declared",
        ("convention",), _swap(advantages=_bessel)),
    Bug("misaligned_rows", "advantages shifted by one row against their rewards",
        ("affine_in_rewards", "zero_group_mean", "degenerate_zero"), _swap(advantages=_misaligned)),
    Bug("interleaved_groups", "response-major rows grouped with a contiguous view(-1, G)",
        ("zero_group_mean", "affine_in_rewards", "degenerate_zero"), _swap(advantages=_interleaved)),
    Bug("sign_flip", "the advantage enters the loss with the wrong sign",
        ("affine_in_rewards",), _swap(advantages=_sign_flip)),
    Bug("float32_constant_group", "non-dyadic rewards (0.7/0.2) standardised in float32 with eps=1e-8",
        ("degenerate_zero",), _swap(score=_partial_credit, advantages=_float32_tiny_eps)),
    Bug("nan_as_zero", "unscorable (NaN) rewards counted as 0 in the baseline and the advantage",
        ("unscorable_rows", "zero_group_mean", "affine_in_rewards"),
        _swap(score=_flaky_verifier, advantages=_nan_as_zero)),
    Bug("token_shift", "token advantages shifted by one position against the tokens",
        ("token_constant_advantage",), _swap(token_advantages=_token_shift)),
    Bug("length_weighted_mask", "the loss mask pre-divided by response length",
        ("mask_binary",), _swap(loss_mask=_length_weighted_mask)),
    Bug("stale_sampler", "the sampler's weights not synced after the last update, so its log-probs are another "
        "policy's on the first epoch", ("on_policy",), _swap(sampler_logprobs=_stale_sampler)),
)}


def pipeline_for(bug: str | None) -> Pipeline:
    """The correct pipeline, or the one with ``bug`` injected."""
    if bug is None:
        return CORRECT
    if bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}; expected one of {', '.join(BUGS)} "
                         "(see `grpo-monitor demo --list-bugs`)")
    return BUGS[bug].apply(CORRECT)
