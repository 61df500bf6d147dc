"""Turn breach counts into :class:`Violation` records (host side, breach path only).

The per-step path only moves counts; the observed values and the first offending group
ids are read from the rollout's per-group tensors when a count is nonzero.
"""

from __future__ import annotations

from typing import Hashable, Sequence

import torch

from .config import MonitorConfig
from .stats.rollout import GROUP_INVARIANTS, RolloutDetail
from .violations import Violation

HINTS: dict[str, str] = {
    "finite": "a zero std without a stabilizer (0/0), a NaN reward propagated into the advantage, or an overflow",
    "unscorable_rows": "unscorable (None/NaN) rewards were counted as 0 in the baseline or given a nonzero advantage",
    "group_size": "rows grouped with the wrong group size, or a contiguous view(-1, G) over interleaved rows",
    "zero_group_mean": "statistics taken over the wrong axis (e.g. the prompt axis), unscorable rows counted in the "
    "mean, or per-row denominators (e.g. a leave-one-out std)",
    "affine_in_rewards": "rows misaligned after a shuffle, wrong grouping, a sign flip, or per-row denominators",
    "degenerate_zero": "float32 rounding of a constant group's std with a tiny stabilizer, or an epsilon used as a floor",
    "convention": "a swapped scale_rewards branch, Bessel (torch.std's default) where population was meant, "
    "or a stabilizer that changes",
    "token_constant_advantage": "advantages misaligned with tokens, or per-token advantages with outcome_rewards=True",
    "mask_binary": "a mask that holds weights or garbage instead of 0/1",
    "finite_logprobs": "-inf log-probabilities from masked logits leaking onto valid tokens",
    "on_policy": "the sampler (e.g. vLLM) and the trainer compute different log-probabilities for the same tokens",
}

_MAX_GROUPS = 5


def group_violations(
    counts: dict[str, float],
    records: Sequence[tuple[RolloutDetail, Sequence[Hashable]]],
    config: MonitorConfig,
    step: int,
) -> list[Violation]:
    """One record per group invariant whose breach count is positive.

    ``records`` are the (per-group detail, group labels) of the rollouts the counts cover;
    each invariant is described from the first of them holding an offending group (none:
    the offenders are on another rank). Only called with counts in hand, so the per-group
    tensors are read on the breach path only.
    """
    out = []
    for name in GROUP_INVARIANTS:
        n = int(counts.get(f"viol_{name}", 0))
        if n <= 0:
            continue
        found = next(((d, lab) for d, lab in records if name in d.offending and bool(d.offending[name].any())), None)
        if found is None:
            out.append(Violation(name, step, f"{n} offending groups on another rank", _expected(name, config), (),
                                 HINTS[name], count=n))
            continue
        observed, groups = _describe(name, found[0], found[1], counts)
        out.append(Violation(name, step, observed, _expected(name, config), groups, HINTS[name], count=n))
    return out


def _expected(name: str, config: MonitorConfig) -> str:
    tol = config.tolerances
    return {
        "finite": "finite advantages and finite-or-NaN rewards",
        "unscorable_rows": f"|advantage| <= {tol.unscorable:g} x typical on NaN-reward rows",
        "group_size": f"{config.group_size} rows per group" if config.group_size else ">= 2 rows per group",
        "zero_group_mean": f"|group mean| <= {tol.zero_group_mean:g} x typical |advantage|",
        "affine_in_rewards": f"a = k (r - mean) with k > 0, rms residual <= {tol.affine_residual:g} x typical |advantage|",
        "degenerate_zero": f"|advantage| <= {tol.degenerate_ratio:g} x typical |advantage| in all-equal groups",
    }[name]


def _describe(name: str, d: RolloutDetail, labels: Sequence[Hashable], counts: dict) -> tuple[str, tuple]:
    mask = d.offending[name]
    idx = torch.nonzero(mask).flatten()[:_MAX_GROUPS].tolist()
    groups = tuple(labels[i] for i in idx)
    typ = counts.get("typ_abs_adv", 1.0)
    f = d.fit
    if name == "group_size":
        sizes = sorted({int(x) for x in d.stats.rows[mask].tolist()})
        return f"{int(mask.sum())} groups with sizes {sizes[:10]}", groups
    if name == "finite":
        bad_rewards = int((d.stats.nonfinite & mask).sum())
        bad_adv = int((f.nonfinite & mask).sum()) if f is not None else 0
        return (f"{int(mask.sum())} groups with non-finite values ({bad_rewards} with an infinite reward, "
                f"{bad_adv} with a NaN or infinite advantage)"), groups
    values, what = {
        "unscorable_rows": (f.unscorable_abs_max, "max |advantage| on NaN-reward rows"),
        "zero_group_mean": (f.intercept.abs(), "max |group mean of advantages|"),
        "degenerate_zero": (f.abs_max, "max |advantage| in an all-equal group"),
        "affine_in_rewards": (f.resid_rms, "max rms residual of a = k (r - mean) + b"),
    }[name]
    worst = float(values[mask].max())
    text = f"{what} {worst:.4g} ({worst / typ:.3g} x typical |advantage| {typ:.4g})"
    if name == "affine_in_rewards":
        text += f"; min slope k_g {float(f.slope[mask].min()):.4g}"
    return text, groups


def token_violations(v: dict[str, float], config: MonitorConfig, step: int) -> list[Violation]:
    """Token-side invariants from the reduced token statistics of the step."""
    tol, out = config.tolerances, []
    if v.get("mask_nonbinary", 0) > 0:
        out.append(Violation("mask_binary", step, f"{int(v['mask_nonbinary'])} mask entries not 0/1", "mask in {0, 1}",
                             hint=HINTS["mask_binary"], count=int(v["mask_nonbinary"])))
    if v.get("logprob_nonfinite", 0) > 0:
        out.append(Violation("finite_logprobs", step, f"{int(v['logprob_nonfinite'])} non-finite log-probs on valid tokens",
                             "finite log-probs on mask==1", hint=HINTS["finite_logprobs"], count=int(v["logprob_nonfinite"])))
    typ = v["adv_abs_sum"] / v["adv_tokens"] if v.get("adv_tokens", 0) > 0 else 1.0
    spread = v.get("adv_row_spread_max", float("-inf"))
    if config.outcome_rewards and spread > tol.token_constant * max(typ, 1e-12):
        out.append(Violation("token_constant_advantage", step, f"max within-row spread {spread:.4g} (typical |adv| {typ:.4g})",
                             f"<= {tol.token_constant:g} x typical |advantage|", hint=HINTS["token_constant_advantage"]))
    gap = v.get("on_policy_absdiff_max", float("-inf"))
    if config.expect_on_policy and gap > tol.on_policy:
        out.append(Violation("on_policy", step, f"max |logprobs - old_logprobs| = {gap:.4g} nats",
                             f"<= {tol.on_policy:g} nats", hint=HINTS["on_policy"]))
    return out
