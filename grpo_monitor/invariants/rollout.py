"""The rollout-side invariants, checked group by group: each record, its device mask and its host decision.

A :class:`GroupCheck` holds one invariant's record, its **mask** (per group, on the device, from the
rollout's group statistics and advantage fit: :func:`offending`, summed into the ``viol_<name>`` count
of the reducible rollout vector by :mod:`grpo_monitor.stats.rollout`) and its **observed** text (host
side, read only when the synced count is positive: :func:`group_violations`). :data:`RESIDUE_RULE`
says when a ``degenerate_zero`` breach is only a warning.

The statistics are :class:`~grpo_monitor.stats.groups.GroupRewardStats` (``s``) and
:class:`~grpo_monitor.stats.groups.AdvantageFit` (``fit``, None without advantages); the step's
per-group detail is :class:`~grpo_monitor.stats.rollout.RolloutDetail` (``d``). They are read, not
imported: the statistics import this module.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

from .record import Invariant, MonitorConfig, Violation, tol, violation

if TYPE_CHECKING:  # the records are read without torch (the catalogue, the CLI); the checks get tensors
    import torch

_MAX_GROUPS = 5
_RESIDUE_ULPS = 4.0  # a float32 mean of G equal values is off by at most ~G/2 ulp; 4 G is the slack

#: mask(s, fit, tolerances, group_size) -> bool per group, or None when the rollout has no advantages.
Mask = Callable[[Any, Any, Any, "int | None"], "torch.Tensor | None"]
#: observed(d, mask, typical |advantage|) -> what a breach message says it saw; read on a breach only.
Observed = Callable[[Any, "torch.Tensor", float], str]


@dataclasses.dataclass(frozen=True)
class GroupCheck:
    """One rollout invariant: its record, its device mask and what a breach message says it observed."""

    record: Invariant
    mask: Mask
    observed: Observed


def _group_size(cfg: MonitorConfig) -> str:
    return f"{cfg.group_size} rows per group" if cfg.group_size else ">= 2 rows per group"


def _live(s: Any, fit: Any) -> torch.Tensor:
    return s.live & ~fit.nonfinite


def _worst(values: Callable[[Any], torch.Tensor], what: str) -> Observed:
    """The worst offending group's value of ``values(fit)``, over the typical |advantage| ``typ``."""
    def observed(d: Any, mask: torch.Tensor, typ: float) -> str:
        worst = float(values(d.fit)[mask].max())
        return f"{what} {worst:.4g} ({worst / typ:.3g} x typical |advantage| {typ:.4g})"
    return observed


def _nonfinite(d: Any, mask: torch.Tensor, typ: float) -> str:
    bad_adv = int((d.fit.nonfinite & mask).sum()) if d.fit is not None else 0
    return (f"{int(mask.sum())} groups with non-finite values ({int((d.stats.nonfinite & mask).sum())} with an "
            f"infinite reward, {bad_adv} with a NaN or infinite advantage)")


def _sizes(d: Any, mask: torch.Tensor, typ: float) -> str:
    return f"{int(mask.sum())} groups with sizes {sorted({int(x) for x in d.stats.rows[mask].tolist()})[:10]}"


def _not_affine(d: Any, mask: torch.Tensor, typ: float) -> str:
    text = _worst(lambda f: f.resid_rms, "max rms residual of a = k (r - mean) + b")(d, mask, typ)
    return text + f"; min slope k_g {float(d.fit.slope[mask].min()):.4g}"


CHECKS: tuple[GroupCheck, ...] = (
    GroupCheck(Invariant(
        "finite", "advantages are finite and rewards are finite or NaN (unscorable)",
        "a zero std without a stabilizer (0/0), a NaN reward propagated into the advantage, or an overflow",
        "rollout", None, "error", lambda cfg: "finite advantages and finite-or-NaN rewards", root_cause=True),
        lambda s, fit, t, g: s.nonfinite | fit.nonfinite if fit is not None else s.nonfinite, _nonfinite),
    GroupCheck(Invariant(
        "unscorable_rows", "unscorable (NaN-reward) rows carry advantage 0 and stay out of their group's statistics",
        "unscorable (None/NaN) rewards were counted as 0 in the baseline or given a nonzero advantage",
        "rollout", "unscorable", "error", tol("unscorable", "|advantage| <= {:g} x typical on NaN-reward rows"),
        promise="NaN-reward rows get advantage 0 and leave every other row's advantage unchanged"),
        lambda s, fit, t, g: None if fit is None else fit.unscorable_abs_max > t.unscorable * fit.typical,
        _worst(lambda f: f.unscorable_abs_max, "max |advantage| on NaN-reward rows")),
    GroupCheck(Invariant(
        "group_size", "every group has the declared size, and no group has a single row",
        "rows grouped with the wrong group size, or a contiguous view(-1, G) over interleaved rows",
        "rollout", None, "error", _group_size),
        lambda s, fit, t, g: (s.rows == 1) | (s.rows != g) if g else s.rows == 1, _sizes),
    GroupCheck(Invariant(
        "zero_group_mean", "advantages have zero mean inside every group with reward variation",
        "statistics taken over the wrong axis (e.g. the prompt axis), unscorable rows counted in the "
        "mean, or per-row denominators (e.g. a leave-one-out std)",
        "rollout", "zero_group_mean", "error", tol("zero_group_mean", "|group mean| <= {:g} x typical |advantage|"),
        promise="in every group the advantages of the scorable rows average to 0", root_cause=True),
        lambda s, fit, t, g: None if fit is None else
        _live(s, fit) & (fit.intercept.abs() > t.zero_group_mean * fit.typical),
        _worst(lambda f: f.intercept.abs(), "max |group mean of advantages|")),
    GroupCheck(Invariant(
        "affine_in_rewards", "inside a group with variation, advantages are an increasing affine function of rewards",
        "rows misaligned after a shuffle, wrong grouping, a sign flip, or per-row denominators",
        "rollout", "affine_residual", "error",
        tol("affine_residual", "a = k (r - mean) with k > 0, rms residual <= {:g} x typical |advantage|"),
        promise="in every group with reward variation a_i = k_g (r_i - mean_g) + b_g with one k_g > 0 "
        "and one b_g for all its scorable rows", root_cause=True),
        lambda s, fit, t, g: None if fit is None else
        _live(s, fit) & ((fit.resid_rms > t.affine_residual * fit.typical) | ~(fit.slope > 0)),
        _not_affine),
    GroupCheck(Invariant(
        "degenerate_zero", "groups whose rewards are all equal carry (near-)zero advantage",
        "float32 rounding of a constant group's std with a tiny stabilizer, or an epsilon used as a floor",
        "rollout", "degenerate_ratio", "error",
        tol("degenerate_ratio", "|advantage| <= {:g} x typical |advantage| in all-equal groups"),
        promise="every row of a group whose scorable rewards are all equal gets advantage 0"),
        lambda s, fit, t, g: None if fit is None else
        s.degenerate & ~fit.nonfinite & (fit.abs_max > t.degenerate_ratio * fit.typical),
        _worst(lambda f: f.abs_max, "max |advantage| in an all-equal group")),
)
RECORDS: tuple[Invariant, ...] = tuple(c.record for c in CHECKS)
_BY_NAME = {c.record.name: c for c in CHECKS}

#: When a ``degenerate_zero`` breach is only a warning (float32 residue the estimator's own
#: arithmetic explains) and when it stays an error (the constant group acts like a real signal).
RESIDUE_RULE = (
    "A constant group's |advantage| above `degenerate_ratio` x typical is a *warning* when it is at most "
    "`degenerate_error` (default 0.25) x the advantage std of a real (live) group and the estimator's arithmetic "
    "explains it: float32 rewards, "
    "|advantage| <= 4 G ulp32(|reward|) / stabilizer (the rounding of a float32 mean of G equal values, "
    "divided by the std + stabilizer). Anything larger makes the constant group weigh like a real one "
    "and is an *error* (e.g. eps 1e-9: +-59.6 on eight rewards of 0.7, about 60x a real group's advantage std)."
)


def offending(s: Any, fit: Any, tolerances: Any, group_size: int | None) -> dict[str, torch.Tensor]:
    """Device side, no host sync: invariant -> bool per group, for every check the rollout's inputs allow."""
    out = {}
    for check in CHECKS:
        mask = check.mask(s, fit, tolerances, group_size)
        if mask is not None:
            out[check.record.name] = mask
    return out


def group_violations(
    counts: dict[str, float],
    records: Sequence[tuple[Any, Sequence[Hashable]]],
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
    for name in _BY_NAME:
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


def _describe(name: str, d: Any, labels: Sequence[Hashable], counts: dict) -> tuple[str, tuple]:
    mask = d.offending[name]
    idx = mask.nonzero().flatten()[:_MAX_GROUPS].tolist()
    return _BY_NAME[name].observed(d, mask, counts.get("typ_abs_adv", 1.0)), tuple(labels[i] for i in idx)


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

    >>> import torch
    >>> round(float(residue_bound(torch.tensor([87.3]), torch.tensor([8.0]), 1e-4)[0]), 3)
    2.441
    """
    exponent = mean_abs.clamp(min=2.0 ** -126).log2().floor()
    ulp = (exponent - 23).exp2()
    return _RESIDUE_ULPS * n * ulp / stabilizer


def _residue_severity(v: Violation, d: Any, typ: float, stabilizer: float | None,
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
