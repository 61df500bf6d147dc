"""What the sampler-side framework cases share: sampled tokens with the log-probs two numerical paths report.

A framework's rollout log-probs come from the inference engine (vLLM, SGLang) and its old
log-probs from the trainer's forward, two numerical paths over the same weights. Here one
set of peaked logits (scaled like a trained model's) is the trainer's float32 path; the
sampler's is the same logits rounded to bfloat16, and the tokens are sampled from the
sampler's own distribution, so E_sampler[exp(trainer - sampler)] = 1 holds as on a healthy
run. The defects are the ones the mismatch invariant exists for: log-probs shifted by one
token, another model's log-probs.
"""

from __future__ import annotations

from typing import Any

import torch

VOCAB = 48
LOGIT_SCALE = 4.0  # peaked: most sampled tokens carry log-probs near 0, as a trained model's do


def sampled_logprobs(rows: int, width: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(trainer, sampler)`` log-probs ``(rows, width)`` float32 of tokens sampled by the bfloat16 sampler."""
    gen = torch.Generator().manual_seed(seed)
    logits = LOGIT_SCALE * torch.randn(rows, width, VOCAB, generator=gen)
    sampler_logits = logits.to(torch.bfloat16).float()
    probs = torch.softmax(sampler_logits, -1).reshape(-1, VOCAB)
    tokens = torch.multinomial(probs, 1, generator=gen).reshape(rows, width, 1)
    trainer = torch.log_softmax(logits, -1).gather(-1, tokens).squeeze(-1)
    sampler = torch.log_softmax(sampler_logits, -1).gather(-1, tokens).squeeze(-1)
    return trainer, sampler


def defective(sampler: torch.Tensor, defect: str, seed: int = 0) -> torch.Tensor:
    """``sampler`` log-probs broken as a real pipeline breaks them (``"shift"``, ``"other_model"``) or as is."""
    if defect == "none":
        return sampler
    if defect == "shift":  # each token reported with its predecessor's log-prob
        return torch.roll(sampler, shifts=1, dims=-1)
    if defect == "other_model":
        other, _ = sampled_logprobs(*sampler.shape, seed=seed + 1000)
        return other
    raise ValueError(f"defect must be 'none', 'shift' or 'other_model', but got {defect!r}")


def sampler_metrics(attachment: Any) -> dict[str, float]:
    """The sampler-side keys of the attachment's last report (mismatch, entropy, truncation, the split)."""
    report = attachment.reports[-1]
    prefixes = ("grpo/mismatch/", "grpo/entropy/", "grpo/rows/", "grpo/groups/degenerate")
    return {k: v for k, v in report.metrics.items() if k.startswith(prefixes)}


def listed(t: torch.Tensor | None) -> Any:
    """A tensor as nested lists of Python numbers (float64 where floating) for the JSON line."""
    if t is None:
        return None
    return t.double().tolist() if t.is_floating_point() else t.tolist()
