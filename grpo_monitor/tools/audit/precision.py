"""The audit at the function's own precision: the tolerance of its equivariance checks, and saturation.

A function computed in float32 reorders its sums when its responses are permuted: the equivariance and
independence checks allow :data:`EQUIVARIANCE_EPS` machine epsilons of the precision it computed in
(:func:`own_precision`). A probe whose rewards leave the function's range (a reward clip) makes its output
constant or two-valued per group (:func:`saturated`): named saturation, not misalignment.
"""

from __future__ import annotations

from typing import Any

import torch

from .probes import DTYPES, UNIT_SCALE, AdvantageFn, Probe, ProbeResult, call

#: Permutation equivariance and batch independence hold to this many machine epsilons of the function's own
#: precision (relative to max |advantage|): float32 reduction order, measured on natively float32 population,
#: Bessel, leave-one-out, one-pass-variance and MaxRL functions at G = 4..64, moves them by at most 23 eps32
#: (MaxRL at G = 16, dividing by a group mean near 0; SkyRL's real MaxRL 14 at G = 8); 256 leaves 11x margin,
#: and a misaligned row moves them by O(1). Never tighter than 1e-6 (the float64 functions' bound).
EQUIVARIANCE_EPS = 256.0
EQUIVARIANCE_FLOOR = 1e-6
def own_precision(out: torch.Tensor) -> torch.dtype:
    """The precision the function computed in, read from its output on float64 rewards: the lowest floating dtype
    that represents every value exactly (a float32 computation cast back to float64 is float32).

    >>> own_precision(torch.tensor([0.1], dtype=torch.float64)), own_precision(torch.tensor([0.1]).double())
    (torch.float64, torch.float32)
    """
    finite = out[torch.isfinite(out)].to(torch.float64)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        if len(finite) and bool((finite.to(dtype).to(torch.float64) == finite).all()):
            return dtype
    return torch.float64


def equivariance_tolerance(fn: AdvantageFn, rewards: torch.Tensor) -> float:
    """The relative tolerance of the equivariance and independence checks: ``EQUIVARIANCE_EPS`` machine epsilons of
    the function's own precision on ``rewards`` (continuous, float64), at least ``EQUIVARIANCE_FLOOR``."""
    eps = torch.finfo(own_precision(call(fn, rewards))).eps
    return max(EQUIVARIANCE_FLOOR, EQUIVARIANCE_EPS * eps)


def saturated(rewards: torch.Tensor, adv: torch.Tensor, rel: float = 1e-6) -> bool:
    """Whether every group with three or more distinct rewards gets at most two distinct advantages (constant or
    two-valued: a clip or bound reached), and there is such a group.

    >>> r = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    >>> saturated(r * 1e4, torch.tensor([[-1.0, -1.0, 1.0, 1.0]])), saturated(r, r - 2.5)
    (True, False)
    """
    r, a = rewards.to(torch.float64), adv.to(torch.float64)
    scale = float(torch.nan_to_num(a.abs(), nan=0.0).max().clamp(min=1e-300))
    seen = False
    for rg, ag in zip(r, a, strict=True):
        keep = ~torch.isnan(rg)
        if len(torch.unique(rg[keep])) < 3:
            continue
        seen = True
        values = torch.sort(ag[keep]).values
        if int((values.diff() > rel * scale).sum()) + 1 > 2:
            return False
    return seen


#: What saturation breaks at a probe (the output no longer moves with the rewards), and how it is named.
SATURATION_BREAKS = ("affine_in_rewards", "zero_group_mean", "degenerate_zero")
SATURATION = ("saturation, not misalignment: at this probe's reward scale the function's output is constant or "
              "two-valued in every group (a reward clip or bound reached) while it is affine in the rewards at unit "
              "scale; rewards this large or offset leave its range")


def name_saturation(results: list[ProbeResult], runs: dict[str, dict], batches: dict[str, Probe],
                    named: dict[int, str]) -> list[str]:
    """Name saturation as the cause of what a non-unit-scale probe breaks where the function saturates
    (:func:`saturated`) while the unit-scale probes show it affine: the hint (kept, by ``id`` in ``named``, from
    the structural causes such as misalignment), its severity unchanged (the live API stops a run whose rewards
    leave the function's range, and the audit says so too). The notes naming each saturated probe."""
    by_probe = {(p.name, p.dtype): p for p in results}
    if any(_affine_errors(by_probe[(n, "float64")]) for n in UNIT_SCALE if (n, "float64") in by_probe):
        return []
    notes = []
    for name in (n for n in batches if n not in (*UNIT_SCALE, "constant", "nan_rows")):
        run = runs["float64"].get(name)
        if run is None or run[1] is None or not saturated(batches[name].rewards, run[1]):
            continue
        found = [v for d in DTYPES if (name, d) in by_probe for v in by_probe[(name, d)].violations
                 if v["invariant"] in SATURATION_BREAKS]
        for v in found:
            v["hint"] = SATURATION
            named[id(v)] = SATURATION
        notes += [f"the {name} probe ({batches[name].description}) saturates the function: {SATURATION}"] if found \
            else []
    return notes


def _affine_errors(p: ProbeResult) -> list[dict[str, Any]]:
    return [v for v in p.violations if v["severity"] == "error" and v["invariant"] == "affine_in_rewards"]
