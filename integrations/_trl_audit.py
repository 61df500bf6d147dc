"""TRL's own logged metrics against the exact values of the same entries (the ``trainer_metric`` audit).

TRL appends one value per generation (``reward``, ``frac_reward_zero_std``, ``completions/*``) or per
micro-batch (``entropy``, ``kl``, ``clip_ratio/*``) to ``trainer._metrics["train"]`` and ``log()`` logs
the flat mean of each list over the logging window (``trl==1.16.0 trl/trainer/grpo_trainer.py``:
``_generate_and_score_completions``, ``_compute_loss``, ``log``). :class:`TRLAudit` pairs every
entry TRL appends with the exact value of the same entry (float64, from the same tensors), and when
the trainer logs it hands both to ``GRPOMonitor.audit_trainer_metrics``: the exact window value of a
generation key is the mean over the window's generations (equal batches), of a micro-batch key the
mean over optimizer steps of each step's mean of micro-batch values (one value per optimizer
window, as TRL #7053 defines it). Micro-batch keys are paired on one process (the exact value of a
micro-batch on several would need a collective of its own).
"""

from __future__ import annotations

import math
from typing import Any

import torch

ROLLOUT_KEYS = ("frac_reward_zero_std", "reward", "reward_std", "completions/mean_length",
                "completions/clipped_ratio", "completions/mean_terminated_length")
LOSS_KEYS = ("entropy", "kl", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean")


def rollout_exact(rewards: torch.Tensor, group_size: int, cut: torch.Tensor, lengths: torch.Tensor,
                  zero_std: bool = True) -> dict[str, float]:
    """The exact values of one generation's rollout keys: gathered rewards (NaN: unscorable), cut flags, lengths
    (``zero_std=False`` leaves ``frac_reward_zero_std`` out, for a caller that takes it elsewhere)."""
    r = rewards.detach().double().flatten()
    scored = r[~torch.isnan(r)]
    out = {"completions/mean_length": float(lengths.double().mean()),
           "completions/clipped_ratio": float(cut.double().mean())}
    done = lengths[~cut.bool()].double()
    out["completions/mean_terminated_length"] = float(done.mean()) if done.numel() else 0.0
    if scored.numel():
        out["reward"] = float(scored.mean())
    if scored.numel() > 1:
        out["reward_std"] = float(scored.std(correction=1))
    if zero_std and r.numel() % group_size == 0:
        out["frac_reward_zero_std"] = zero_std_share(r.view(-1, group_size))
    return out


def group_extrema(groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per group (row of ``groups``): the scorable (non-NaN) count, the largest and the smallest scorable reward
    (-inf and +inf without one)."""
    scorable = ~torch.isnan(groups)
    hi = torch.where(scorable, groups, -math.inf).amax(1)
    lo = torch.where(scorable, groups, math.inf).amin(1)
    return scorable.sum(1), hi, lo


def zero_std_share(groups: torch.Tensor, extrema: tuple[torch.Tensor, ...] | None = None) -> float:
    """The share of groups whose scorable rewards are all equal, exactly (float64): TRL's ``frac_reward_zero_std``
    as it is meant. A group with fewer than two scorable rows has no std (TRL's ``nanstd`` gives NaN): not counted.
    ``extrema``: :func:`group_extrema` of ``groups`` when the caller has them."""
    count, hi, lo = extrema if extrema is not None else group_extrema(groups)
    return float(((count >= 2) & (hi == lo)).double().mean())


def loss_exact(mask: torch.Tensor, entropies: torch.Tensor | None, logps: torch.Tensor,
               ref: torch.Tensor | None, clips: torch.Tensor | None, kl_weight: torch.Tensor | None = None
               ) -> dict[str, float]:
    """The exact values of one micro-batch's loss keys (float64 token means; clips: low, high, region, tokens;
    ``kl_weight``: TRL's ``use_bias_correction_kl`` factor, the importance weight ``coef_1``)."""
    m = mask.double()
    n = float(m.sum())
    if n <= 0:
        return {}
    out = {}
    if entropies is not None:
        out["entropy"] = float((entropies.detach().double() * m).sum()) / n
    if ref is not None:
        u = ref.detach().double() - logps.detach().double()
        k3 = u.exp() - u - 1
        out["kl"] = float((k3 * (1.0 if kl_weight is None else kl_weight) * m).sum()) / n
    if clips is not None:
        low, high, region, tokens = clips.tolist()
        if tokens > 0:
            out.update({"clip_ratio/low_mean": low / tokens, "clip_ratio/high_mean": high / tokens,
                        "clip_ratio/region_mean": region / tokens})
    return out


def importance_weight(logps: torch.Tensor, old: torch.Tensor | None, mask: torch.Tensor, level: str) -> torch.Tensor:
    """TRL's ``coef_1`` in float64: ``exp(logp - old)`` per token, or per row of its masked mean (``"sequence"``)."""
    log_ratio = logps.detach().double() - (logps.detach().double() if old is None else old.detach().double())
    if level == "sequence":
        m = mask.double()
        return ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0)).exp().unsqueeze(-1)
    return log_ratio.exp()


class TRLAudit:
    """The exact value of every entry TRL appended since its last log, by key, with the optimizer step of each."""

    def __init__(self, trainer: Any):
        self.trainer = trainer
        self.entries: dict[str, list[tuple[int, float]]] = {}

    def counts(self) -> dict[str, int]:
        """How many entries TRL holds per key now (taken before a call that may append one)."""
        return {k: len(v) for k, v in self.trainer._metrics["train"].items()}

    def pair(self, before: dict[str, int], exact: dict[str, float], step: int) -> None:
        """Pair each key TRL appended exactly one entry to since ``before`` with its exact value."""
        now = self.counts()
        for key, value in exact.items():
            if now.get(key, 0) == before.get(key, 0) + 1:
                self.entries.setdefault(key, []).append((step, value))

    def window(self) -> tuple[dict[str, float], dict[str, float], tuple[int, ...]]:
        """TRL's would-be logged values (its ``log()``: the mean of the non-NaN entries), the exact window values,
        and the micro-batches per optimizer step of the window; the pairs are cleared."""
        held, entries, self.entries = self.trainer._metrics["train"], self.entries, {}
        logged, exact = {}, {}
        windows: dict[int, int] = {}
        for key, pairs in entries.items():
            values = list(held.get(key, ()))
            if len(values) != len(pairs) or any(isinstance(v, float) and math.isnan(v) for v in values):
                continue  # entries the hooks did not see (or NaN batches TRL drops): no faithful pairing
            logged[key] = sum(values) / len(values)
            exact[key] = _window_exact(pairs, key in LOSS_KEYS)
            if key == "entropy":
                for s, _ in pairs:
                    windows[s] = windows.get(s, 0) + 1
        return logged, exact, tuple(windows[s] for s in sorted(windows))


def _window_exact(pairs: list[tuple[int, float]], per_step: bool) -> float:
    """The mean over entries, or (``per_step``) over optimizer steps of each step's mean of entries."""
    if not per_step:
        return sum(v for _, v in pairs) / len(pairs)
    steps: dict[int, list[float]] = {}
    for s, v in pairs:
        steps.setdefault(s, []).append(v)
    return sum(sum(v) / len(v) for v in steps.values()) / len(steps)
