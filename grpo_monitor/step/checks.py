"""Checks: from what a step synced to :class:`Violation` records. Pure functions, host side.

:func:`check_rollout` judges a synced rollout's estimator against the run's lock and returns
the violations, the judgement and the narrowed lock as data (:class:`RolloutCheck`); the
monitor applies them. :func:`rollout_findings` decides what counts: the estimator's promises
filter the device-side breaches, pass@k estimators get their own check, and a ``convention``
finding is added only when no structural breach already explains the misfit (the root-cause rule).

The per-step path only moves counts; the observed values and the first offending group
ids are read from the rollout's per-group tensors when a count is nonzero (the breach
path). Statements, hints, expected values and default severities come from
:data:`~grpo_monitor.catalog.invariants.INVARIANTS`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Sequence

import numpy as np
import torch

from ..catalog.invariants import DEVICE_PROMISES, GROUP_INVARIANTS, INVARIANTS, ROOT_CAUSES
from ..config import MonitorConfig
from ..estimators.judge import EstimatorJudge, Judgement, ignores_groups
from ..stats.rollout import RolloutDetail
from ..violations import Violation

_MAX_GROUPS = 5
_RESIDUE_ULPS = 4.0  # a float32 mean of G equal values is off by at most ~G/2 ulp; 4 G is the slack


@dataclasses.dataclass(frozen=True)
class RolloutCheck:
    """What checking one synced rollout slice found: its violations, the estimator judgement (None: no
    live group carries advantages) and the run's estimator lock after it (the one given is unchanged)."""

    found: list[Violation]
    judged: Judgement | None
    lock: EstimatorJudge


def check_rollout(rollout: dict[str, float], records: Sequence, lock: EstimatorJudge, config: MonitorConfig,
                  step: int) -> RolloutCheck:
    """Judge the rollout's estimator under the run's ``lock`` and decide what counts (:func:`rollout_findings`)."""
    judged, after = lock.judged(rollout, records, breached_promises(rollout))
    return RolloutCheck(rollout_findings(rollout, records, judged, config, step), judged, after)


def breached_promises(rollout: dict[str, float]) -> frozenset[str]:
    """The device-side promises the rollout's counts show broken (what the estimator judge weighs)."""
    return frozenset(name for name in DEVICE_PROMISES if rollout.get(f"viol_{name}", 0) > 0)


def rollout_findings(rollout: dict[str, float], records: Sequence, judged: Judgement | None,
                     config: MonitorConfig, step: int) -> list[Violation]:
    """The violations of a synced rollout under the estimator ``judged`` (None: nothing named, all count).

    ``records`` are the step's rollout records (per-group detail, labels, question ids, the
    inputs). Only what the estimator promises counts; a misfit no root cause explains is a
    ``convention`` error.
    """
    stabilizer = config.stabilizer if config.stabilizer is not None else getattr(judged, "stabilizer", None)
    labelled = [(r.detail, r.questions if r.questions is not None else r.labels) for r in records]
    found = group_violations(rollout, labelled, config, step, stabilizer)
    if judged is None:
        return found
    found = [v for v in found if v.invariant not in DEVICE_PROMISES or v.invariant in judged.promises]
    if "one_nonzero_per_group" in judged.promises:
        found += passk_violations(records, config, step)
    if judged.problem and not any(v.invariant in ROOT_CAUSES for v in found):
        hint = {"hint": judged.hint} if judged.hint else {}
        found.append(violation("convention", step, judged.problem, config, judged.groups, **hint))
    if judged.unknown:
        found.append(violation("unknown_estimator", step, judged.unknown, config))
    return found


def batch_axis_note(judged: Judgement | None, config: MonitorConfig) -> str | None:
    """Under ``"auto"``, what to say when the identified estimator ignores the groups the rollout declares (a
    batch baseline: the wrong normalisation axis for GRPO, whose ``zero_group_mean`` breach it does not promise,
    so it would pass unseen); None when it uses them, or when an integration or the user declared it."""
    name = judged.name if judged is not None else None
    if config.estimator != "auto" or not ignores_groups(name):
        return None
    return (f"grpo-monitor: under estimator='auto' the advantages fit {name}, which ignores the groups the "
            "rollout declares (baseline and scale over the whole batch: the wrong normalisation axis for GRPO, "
            "so group means of the advantages are not 0 and are not checked); if your trainer means to run "
            f"{name}, declare MonitorConfig(std_convention={name!r}) to silence this")


def violation(name: str, step: int, observed: str, config: MonitorConfig, groups: tuple = (), **kw) -> Violation:
    """A :class:`Violation` of ``name`` with its registry hint, expected value and default severity."""
    inv = INVARIANTS[name]
    kw.setdefault("severity", inv.severity)
    hint = kw.pop("hint", inv.hint)
    return Violation(name, step, observed, inv.expected(config), groups, hint, **kw)


def group_violations(
    counts: dict[str, float],
    records: Sequence[tuple[RolloutDetail, Sequence[Hashable]]],
    config: MonitorConfig,
    step: int,
    stabilizer: float | None = None,
) -> list[Violation]:
    """One record per group invariant whose breach count is positive.

    ``records`` are the (per-group detail, group labels) of the rollouts the counts cover;
    each invariant is described from the first of them holding an offending group (none:
    the offenders are on another rank). ``stabilizer`` (declared or fitted) lets a
    ``degenerate_zero`` breach that float32 rounding explains be a warning (``RESIDUE_RULE``).
    """
    out = []
    for name in GROUP_INVARIANTS:
        n = int(counts.get(f"viol_{name}", 0))
        if n <= 0:
            continue
        found = next(((d, lab) for d, lab in records if name in d.offending and bool(d.offending[name].any())), None)
        if found is None:
            out.append(violation(name, step, f"{n} offending groups on another rank", config, count=n))
            continue
        observed, groups = _describe(name, found[0], found[1], counts)
        v = violation(name, step, observed, config, groups, count=n)
        if name == "degenerate_zero":
            v = _residue_severity(v, found[0], _live_scale(counts), stabilizer, config)
        out.append(v)
    return out


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
    assert f is not None, f"{name} is checked on advantages, so the rollout has an advantage fit"
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


def _live_scale(counts: dict) -> float:
    """What a real group weighs: the mean advantage std of the live groups (typical |advantage| without them).

    For z-scores it is ~1 whatever the rewards, unlike the median |advantage|, which a nearly
    constant live group can make small.
    """
    live = counts.get("live", 0.0)
    scale = counts.get("live_adv_std_sum", 0.0) / live if live > 0 else 0.0
    return scale if scale > 0 and math.isfinite(scale) else counts.get("typ_abs_adv", 1.0)


def residue_bound(mean_abs: torch.Tensor, n: torch.Tensor, stabilizer: float) -> torch.Tensor:
    """The largest |advantage| float32 rounding gives a constant group: 4 n ulp32(|r|) / stabilizer.

    >>> round(float(residue_bound(torch.tensor([87.3]), torch.tensor([8.0]), 1e-4)[0]), 3)
    2.441
    """
    exponent = torch.floor(torch.log2(mean_abs.clamp(min=2.0 ** -126)))
    ulp = torch.pow(2.0, exponent - 23)
    return _RESIDUE_ULPS * n * ulp / stabilizer


def _residue_severity(v: Violation, d: RolloutDetail, typ: float, stabilizer: float | None,
                      config: MonitorConfig) -> Violation:
    """``degenerate_zero`` as a warning when float32 rounding explains every offending group and none
    weighs more than ``tolerances.degenerate_error`` of a real group (``typ``: the live groups' mean
    advantage std; see ``RESIDUE_RULE``)."""
    mask, fit = d.offending["degenerate_zero"], d.fit
    assert fit is not None, "degenerate_zero is checked on advantages, so the rollout has an advantage fit"
    worst = float(fit.abs_max[mask].max())
    if not stabilizer or not math.isfinite(worst) or worst > config.tolerances.degenerate_error * typ:
        return v
    bound = residue_bound(d.stats.mean[mask].abs(), d.stats.n[mask], stabilizer)
    if not bool((fit.abs_max[mask] <= bound).all()):
        return v
    ulp = float(bound.max()) * stabilizer / (_RESIDUE_ULPS * float(d.stats.n[mask].max()))
    cause = (f"float32 residue: a constant group's mean is off by a few ulp (ulp32 of |reward| "
             f"{float(d.stats.mean[mask].abs().max()):.4g} is {ulp:.3g}), "
             f"divided by std + stabilizer {stabilizer:g}; harmless at {worst / typ:.2g} x a real group's "
             "advantage std")
    return dataclasses.replace(v, severity="warning", hint=cause)


def passk_violations(records: Sequence, config: MonitorConfig, step: int) -> list[Violation]:
    """pass@k: in each group with reward variation at most one row is nonzero, and it holds the group's best reward.

    Host side (the rows are copied once); only for estimators promising ``one_nonzero_per_group``.
    """
    from ..estimators.rows import host_rows

    rows = host_rows(records)
    r, g, a, labels = rows.rewards, rows.gid, rows.advantages, rows.labels
    if a is None or not rows.replayable or not len(a):
        return []
    valid = ~np.isnan(r)
    n_groups = int(g.max()) + 1
    best = np.full(n_groups, -np.inf)
    np.maximum.at(best, g[valid], r[valid])
    nonzero = valid & (np.abs(a) > config.tolerances.zero_group_mean * _typical_nonzero(a, valid))
    count = np.bincount(g[nonzero], minlength=n_groups)
    wrong_row = np.bincount(g[nonzero & (r < best[g])], minlength=n_groups)
    bad = np.flatnonzero((count > 1) | (wrong_row > 0))
    if not len(bad):
        return []
    first = tuple(labels[i] for i in bad[:_MAX_GROUPS])
    observed = (f"{len(bad)} groups with more than one nonzero row or a nonzero row below the group's best "
                f"(max {int(count.max())} nonzero rows in a group)")
    return [violation("one_nonzero_per_group", step, observed, config, first, count=len(bad))]


def _typical_nonzero(a: np.ndarray, valid: np.ndarray) -> float:
    vals = np.abs(a[valid])
    vals = vals[vals > 0]
    return float(np.median(vals)) if len(vals) else 1.0


def token_violations(v: dict[str, float], config: MonitorConfig, step: int,
                     mismatch_batches: Sequence[tuple[torch.Tensor, ...]] = (), lag: float = 0.0) -> list[Violation]:
    """Token-side invariants from the reduced token statistics of the step (``mismatch_batches``: this
    rank's (mask, trainer, sampler) micro-batches, to name the first offending rows of a mismatch; ``lag``: the
    largest row age the rollout's ``policy_version`` shows, a lag by design like ``max_policy_lag``)."""
    tol, out = config.tolerances, []
    if v.get("mask_nonbinary", 0) > 0:
        n = int(v["mask_nonbinary"])
        out.append(violation("mask_binary", step, f"{n} mask entries not 0/1", config, count=n))
    if v.get("logprob_nonfinite", 0) > 0:
        n = int(v["logprob_nonfinite"])
        out.append(violation("finite_logprobs", step, f"{n} non-finite log-probs on valid tokens", config, count=n))
    typ = v["adv_abs_sum"] / v["adv_tokens"] if v.get("adv_tokens", 0) > 0 else 1.0
    spread = v.get("adv_row_spread_max", float("-inf"))
    if config.outcome_rewards and spread > tol.token_constant * max(typ, 1e-12):
        out.append(violation("token_constant_advantage", step,
                             f"max within-row spread {spread:.4g} (typical |adv| {typ:.4g})", config))
    if config.expect_on_policy and v.get("ratio_tokens", 0) > 0:
        out += _on_policy(v, config, step)
    if v.get("mm_tokens", 0) > 0:
        found = mismatch_violations(v, config, step, lag)
        out += [dataclasses.replace(f, groups=worst_rows(mismatch_batches)) for f in found]
    return out


def worst_rows(batches: Sequence[tuple[torch.Tensor, ...]], limit: int = _MAX_GROUPS) -> tuple[str, ...]:
    """The rows with the largest mean k3(trainer - sampler), as 'micro-batch b row r: k3 x' (host, float64)."""
    scored = []
    for b, (mask, trainer, sampler) in enumerate(batches):
        valid = mask.detach().cpu() > 0
        d = torch.where(valid, trainer.detach().cpu().double() - sampler.detach().cpu().double(), 0.0)
        k3 = (torch.expm1(d) - d).sum(1) / valid.sum(1).clamp_min(1)
        scored += [(float(k), b, r) for r, k in enumerate(k3.tolist()) if valid[r].any()]
    scored.sort(key=lambda t: -t[0] if math.isfinite(t[0]) else -math.inf)
    return tuple(f"micro-batch {b} row {r}: k3 {k:.3g}" for k, b, r in scored[:limit])


def _on_policy(v: dict[str, float], config: MonitorConfig, step: int) -> list[Violation]:
    """Trainer against trainer: the mismatch rule (mean k3 of logprobs - old_logprobs), or the bitwise max."""
    gap, k3 = v["on_policy_absdiff_max"], v["ratio_k3_sum"] / v["ratio_tokens"]
    text = f"mean k3(logprobs - old_logprobs) = {k3:.4g} nats per token, max |logprobs - old_logprobs| = {gap:.4g}"
    bad = gap > config.tolerances.on_policy if config.on_policy_bitwise else not k3 <= config.tolerances.mismatch_k3
    return [violation("on_policy", step, text, config)] if bad else []


def mismatch_violations(v: dict[str, float], config: MonitorConfig, step: int, lag: float = 0.0) -> list[Violation]:
    """``mismatch``: an error when the mismatch KL is far above numerical noise (unless the sampler lags by
    design), a warning when the importance weights do not average to 1; noise is never a violation."""
    from ..stats.tokens.readout import mismatch_metrics

    m, tol = mismatch_metrics(v), config.tolerances
    k3, z = v["mm_k3_sum"] / v["mm_tokens"], m["grpo/mismatch/ratio_mean_z"]
    numbers = (f"mismatch KL k3 {k3:.4g} nats per token (noise: <= {tol.mismatch_k3:g}), k1 "
               f"{m['grpo/mismatch/k1_mean']:.4g}, mean |Delta| {v['mm_abs_sum'] / v['mm_tokens']:.4g}, "
               f"p99 |Delta| {m['grpo/mismatch/abs_diff_p99']:.4g}, mean importance weight "
               f"{m['grpo/mismatch/ratio_mean']:.5g} ({z:+.3g} standard errors from 1) over "
               f"{int(v['mm_tokens'])} tokens")
    n = int(v["mm_tokens"])
    if not k3 <= tol.mismatch_k3 and config.max_policy_lag == 0 and lag == 0:
        hint = ("a mismatch KL far above numerical noise: sampler weights not synced (one or more optimizer steps "
                "stale), log-probs taken before temperature was applied, tokens or the mask shifted by one, or "
                "another model's log-probs; if the sampler lags by design, declare MonitorConfig.max_policy_lag "
                "or pass observe_rollout(policy_version=)")
        return [violation("mismatch", step, numbers, config, count=n, hint=hint)]
    if not abs(z) <= tol.mismatch_ratio_z and not abs(m["grpo/mismatch/ratio_mean"] - 1) <= tol.mismatch_ratio_bias:
        hint = ("the importance weights exp(trainer - sampler) do not average to 1, so the sampler's log-probs "
                "are not those of the distribution it sampled from: top-p/top-k sampling with log-probs "
                "renormalised over the nucleus while the trainer scores the full vocabulary, or logits processed "
                "(penalties, bias, temperature) after the log-probs were taken")
        return [violation("mismatch", step, numbers, config, count=n, severity="warning", hint=hint)]
    return []
