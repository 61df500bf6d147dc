"""``grpo-monitor audit``'s diagnosis: which cause a combination of symptoms points to.

A wrong axis breaks permutation equivariance *and* batch independence; a misalignment only
the first; a sign flip is a registry entry that matches the negated advantages; lost
precision is a near match; a batch-wide or off-centre baseline shows in the group means.
The hint of each error violation is replaced by the cause its combination points to, so a
wrong axis is never blamed on float32 rounding.
"""

from __future__ import annotations

import functools
from typing import Any

from ...estimators import Estimator, get
from ...invariants.probes import PERMUTATION
from . import registry
from .probes import Match

#: Likely causes, each given away by a combination of symptoms (see :func:`structural_causes`).
CAUSES = {
    "wrong_axis": "statistics over the wrong axis: mean/std across prompts (dim 0) instead of within each group "
    "(dim 1): advantages are neither equivariant within a group nor independent of the other groups",
    "misaligned": "advantages misaligned with their rewards (rolled, shuffled or gathered within the group): they "
    "do not follow their responses when the responses are permuted",
    "batch_baseline": "a baseline over the whole batch instead of each group's mean: group means are not 0 and "
    "each group's advantages depend on the other groups",
    "off_center": "a baseline other than the group mean, or a constant added: the advantages follow their "
    "responses and ignore the other groups, but do not average to 0 within a group",
    "nonlinear": "a nonlinear map of the rewards within a group (clipping, ranks, a per-row denominator): the "
    "advantages follow their responses but are not an increasing affine function of the rewards",
    "nan_counted": "unscorable (NaN) rewards enter the group statistics (e.g. nan_to_num(rewards, 0) before the "
    "mean/std) or get a nonzero advantage: mask them and give them advantage 0",
    "tiny_eps": "float32 rounding of a constant group's mean, divided by a tiny stabilizer or an epsilon used as a "
    "floor: the constant group weighs like a real one (give groups whose std is 0 advantage 0, or use a larger eps)",
    "not_rounding": "all-equal groups get nonzero advantages even on 0/1 rewards, which every precision holds "
    "exactly, so not rounding: a baseline other than the group mean, or a constant added to every advantage",
}
#: The invariants each structural cause explains (the others keep the monitor's hint).
EXPLAINS = {
    "wrong_axis": ("zero_group_mean", "affine_in_rewards", "degenerate_zero", PERMUTATION.name),
    "misaligned": ("affine_in_rewards", "zero_group_mean", PERMUTATION.name),
    "sign_flip": ("affine_in_rewards",),
    "near": ("zero_group_mean", "affine_in_rewards"),
}

def structural_causes(equivariant: bool | None, independent: bool | None, rows, descriptions: dict[str, str]
                      ) -> dict[str, str]:
    """invariant -> the cause the symptoms point to: an axis, a misalignment, a sign flip, lost precision, a
    baseline; ``rows`` is (float64 rows, the same negated)."""
    kind, cause = None, ""
    if equivariant is False:
        kind = "wrong_axis" if independent is False else "misaligned"
        cause = CAUSES[kind]
    elif flipped := registry.registry_matches(rows[1]):
        kind, cause = "sign_flip", f"sign flip: the negated advantages match {registry.describe(flipped[0])}"
    elif near := registry.near_match(rows[0], descriptions):
        kind, cause = "near", near
    if kind:
        return {invariant: cause for invariant in EXPLAINS[kind]}
    if equivariant and independent is False:
        return {"zero_group_mean": CAUSES["batch_baseline"]}
    return {"zero_group_mean": CAUSES["off_center"], "affine_in_rewards": CAUSES["nonlinear"]} if equivariant else {}


def apply_causes(violations: list[dict[str, Any]], structural: dict[str, str], nan_rows: str) -> list[str]:
    """Replace the generic hints of error violations by the cause the combination points to; the causes used."""
    used: list[str] = []
    for v in (v for v in violations if v["severity"] == "error"):
        cause = None
        if v["probe"] == "nan_rows" and nan_rows == "counted":
            cause = CAUSES["nan_counted"]
        elif v["probe"] != "nan_rows":
            cause = structural.get(v["invariant"])
        if cause:
            v["hint"] = cause
            used += [cause] if cause not in used else []
    return used


def _family(est: Estimator) -> tuple:
    ref = est.reference
    if isinstance(ref, functools.partial):
        return ref.func, ref.keywords.get("scale")
    return ref, None


def expectation_cause(expected: str, inferred: Match | None) -> str:
    """Why ``expected`` does not fit, worded from the entry that does."""
    want = get(expected)
    if inferred is None:
        return f"expected {expected} ({want.description}), but no registry entry reproduces the function"
    got, head = get(inferred.name), f"expected {expected}, inferred {inferred.name}: "
    same = _family(want) == _family(got)
    if same and want.params.get("ddof") != got.params.get("ddof"):
        std = {0: "population std (correction=0)", 1: "Bessel std (torch.std's default, correction=1)"}
        return head + f"{std[got.params['ddof']]} where {std[want.params['ddof']]} was expected"
    if same and want.fit_param and want.fit_param in inferred.params:
        return head + (f"another stabilizer: {want.fit_param} {inferred.params[want.fit_param]:.1e} where "
                       f"{expected} uses {want.params[want.fit_param]:g}")
    return head + f"{got.description} instead of {want.description}"


