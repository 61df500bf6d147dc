"""AReaL's real ``PPOActor._compute_advantages`` on batches carrying the inference engine's and the trainer's log-probs.

AReaL's batch holds ``logprobs`` (the inference engine's, aligned with ``input_ids``) and,
when the trainer recomputed them (``recompute_logprob`` / ``use_decoupled_loss``), ``prox_logp``
(aligned with the rolled ``loss_mask``). Run in the AReaL venv: ``python areal_sampler_cases.py
[CASE ...]``; prints ``GRPO_CASES {json}`` with the monitor's sampler-side metrics and what it was fed.
"""

from __future__ import annotations

import logging
import sys

import torch

from _cases import config_kwargs, outcome_batch, run
from _sampler import defective, listed, sampled_logprobs, sampler_metrics
from areal_cases import NORMS, PROMPT, G, T, actor
from grpo_monitor import MonitorConfig
from grpo_monitor.integrations import areal as gar

logging.disable(logging.INFO)
GROUPS = 6
MAX_NEW = T - PROMPT - 1  # outcome_batch's longest response: those rows hit the limit


def batch(defect: str = "none", recomputed: bool = True, seed: int = 0) -> dict:
    """AReaL's padded batch (prompt of PROMPT tokens, then the response; groups contiguous) with both log-probs."""
    scores, lengths, _, _ = outcome_batch(GROUPS, G, MAX_NEW, seed)
    n = len(scores)
    pos = torch.arange(T)[None, :]
    seqlen = PROMPT + lengths
    loss_mask = ((pos >= PROMPT) & (pos < seqlen[:, None])).long()
    trainer, sampler = sampled_logprobs(n, T, seed)  # both in the rolled alignment (position t scores token t+1)
    sampler = defective(sampler, defect, seed)
    rolled = torch.roll(loss_mask, -1, -1)
    data = {"input_ids": torch.zeros(n, T, dtype=torch.long), "rewards": scores,
            "attention_mask": (pos < seqlen[:, None]).long(), "loss_mask": loss_mask,
            "logprobs": torch.roll(sampler * rolled, 1, -1)}  # what the engine returns, aligned with input_ids
    if recomputed:
        data["prox_logp"] = trainer * rolled
    return data


def sampler_side(defect: str = "none", **kw) -> dict:
    a = actor(*NORMS["grpo"], max_new_tokens=MAX_NEW, **{"recompute_logprob": True, **kw})
    data = batch(defect)
    fed_in = {"sampler": torch.roll(data["logprobs"], -1, -1), "trainer": data["prox_logp"].clone()}
    att = gar.attach(config=MonitorConfig(**config_kwargs()))
    try:
        out = a._compute_advantages(data)
        mask = out["loss_mask"]
        return {"metrics": sampler_metrics(att), "max_policy_lag": att.monitor.config.max_policy_lag,
                "violations": [[v.invariant, v.severity] for v in att.reports[-1].violations],
                "fed": {"mask": listed(mask), "sampler": listed(fed_in["sampler"]),
                        "trainer": listed(fed_in["trainer"]),
                        "rewards": listed(out["rewards"]), "group": (torch.arange(len(mask)) // G).tolist(),
                        "truncated": listed(mask.sum(-1) >= MAX_NEW)}}
    finally:
        gar.detach()


def without_recompute() -> dict:
    """No trainer recompute (the engine's log-probs are the old ones): no mismatch family, nothing raised."""
    a = actor(*NORMS["grpo"], max_new_tokens=MAX_NEW)
    att = gar.attach(config=MonitorConfig(**config_kwargs()))
    try:
        a._compute_advantages(batch("shift", recomputed=False))
        return {"metrics": sampler_metrics(att), "violations": [v.invariant for v in att.reports[-1].violations]}
    finally:
        gar.detach()


def decoupled_with_a_strict_monitor() -> dict:
    """A monitor the user built with max_policy_lag=0 under the decoupled loss: one warning, then the error."""
    from grpo_monitor import GRPOMonitor

    a = actor(*NORMS["grpo"], max_new_tokens=MAX_NEW, use_decoupled_loss=True, recompute_logprob=True)
    gar.attach(GRPOMonitor(MonitorConfig(**config_kwargs())))
    try:
        a._compute_advantages(batch("other_model"))
        return {"raised": None}
    finally:
        gar.detach()


def versions() -> dict:
    """AReaL's per-token ``versions`` (rows generated over versions 3-7, the actor's engine at version 7: the one
    method of AReaL's engine the integration reads, ``get_version``) -> the rows' ages."""
    a = actor(*NORMS["grpo"], max_new_tokens=MAX_NEW)
    a.engine = type("VersionedEngine", (), {"get_version": lambda self: 7})()
    data = batch(recomputed=False)
    head = 7 - torch.arange(len(data["rewards"])) % 5  # row i's oldest generated token: version 7 - i % 5
    data["versions"] = torch.where(data["loss_mask"] > 0, head[:, None], -1).int()
    att = gar.attach(config=MonitorConfig(**config_kwargs()))
    try:
        a._compute_advantages(data)
        m = att.reports[-1].metrics
        return {"metrics": {k: v for k, v in m.items() if k.startswith("grpo/offpolicy/")},
                "heads": head.tolist()}
    finally:
        gar.detach()


CASES = {
    "versions": versions,
    "recompute": sampler_side,
    "recompute_shifted_by_one": lambda: sampler_side("shift"),
    "decoupled": lambda: sampler_side(use_decoupled_loss=True),
    "decoupled_stale_sampler": lambda: sampler_side("other_model", use_decoupled_loss=True),
    "without_recompute": without_recompute,
    "decoupled_with_a_strict_monitor": decoupled_with_a_strict_monitor,
}

if __name__ == "__main__":
    run(CASES, sys.argv[1:])
