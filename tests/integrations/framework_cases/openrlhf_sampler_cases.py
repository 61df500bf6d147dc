"""OpenRLHF's real ``compute_advantages_and_returns`` on ``Experience`` batches carrying the sampler's side.

Run in the OpenRLHF venv: ``python openrlhf_sampler_cases.py [CASE ...]``; prints ``GRPO_CASES {json}``
with the monitor's sampler-side metrics and the tensors it was fed, which the test recomputes in float64.
"""

from __future__ import annotations

import sys

import torch

from _cases import config_kwargs, outcome_batch, run
from _sampler import defective, listed, sampled_logprobs, sampler_metrics
from grpo_monitor import MonitorConfig
from grpo_monitor.integrations import openrlhf as gor
from openrlhf_cases import MICRO, Experience, G, make_maker  # loads OpenRLHF with its GPU stand-ins

GROUPS, T = 6, 10


def experiences(defect: str = "none", seed: int = 0) -> list:
    """Shuffled micro-batches of GROUPS x G rows, with vLLM-style rollout log-probs and truncation flags."""
    scores, lengths, mask, perm = outcome_batch(GROUPS, G, T, seed)
    trainer, sampler = sampled_logprobs(len(scores), T, seed)
    sampler = defective(sampler, defect, seed)
    truncated = lengths == T  # what vLLM reports as finish_reason == "length" at max_tokens = T
    out = []
    for rows in perm.split(MICRO):
        width = int(lengths[rows].max())
        m = mask[rows, :width]
        out.append(Experience(
            action_mask=m.bool(), rewards=scores[rows].clone(), index=rows.tolist(), response_length=lengths[rows],
            action_log_probs=trainer[rows, :width], rollout_log_probs=sampler[rows, :width] * m,
            truncated=truncated[rows], base_action_log_probs=None, kl=torch.zeros_like(m),
            values=torch.zeros_like(m), info={}))
    return out


def fed(exps: list) -> dict:
    """What the experiences hold, for the float64 reference: per micro-batch tensors and the rollout's rows."""
    return {"mask": [listed(e.action_mask.double()) for e in exps],
            "trainer": [listed(e.action_log_probs) for e in exps],
            "sampler": [listed(e.rollout_log_probs) for e in exps],
            "rewards": listed(torch.cat([e.rewards for e in exps])),
            "group": [i // G for e in exps for i in e.index],
            "truncated": listed(torch.cat([e.truncated for e in exps]))}


def sampler_side(defect: str = "none") -> dict:
    maker = make_maker("group_norm")
    exps = experiences(defect)
    att = gor.attach(config=MonitorConfig(**config_kwargs()))
    try:
        maker.compute_advantages_and_returns(exps)
        report = att.reports[-1]
        return {"metrics": sampler_metrics(att), "fed": fed(exps),
                "violations": [[v.invariant, v.severity] for v in report.violations]}
    finally:
        gor.detach()


def without_rollout_logprobs() -> dict:
    """Experiences without rollout log-probs (is_correction_level off): no mismatch family, nothing breaks."""
    maker = make_maker("group_norm")
    exps = experiences()
    for e in exps:
        e.rollout_log_probs, e.truncated = None, None
    att = gor.attach(config=MonitorConfig(**config_kwargs()))
    try:
        maker.compute_advantages_and_returns(exps)
        return {"metrics": sampler_metrics(att), "violations": [v.invariant for v in att.reports[-1].violations]}
    finally:
        gor.detach()


CASES = {
    "healthy": sampler_side,
    "shifted_by_one": lambda: sampler_side("shift"),
    "other_model": lambda: sampler_side("other_model"),
    "without_rollout_logprobs": without_rollout_logprobs,
}

if __name__ == "__main__":
    run(CASES, sys.argv[1:])
