"""Audit a user's advantage function ``rewards (B, G) -> advantages (B, G)`` with crafted batches.

Each probe batch (:mod:`.audit_probes`) is run in float64 and in float32 through a fresh
:class:`GRPOMonitor`: the invariant checks are the monitor's own, with their severities.
On top, the audit names the registry entry the function reproduces, checks permutation
equivariance and independence from the rest of the batch, classifies NaN (unscorable)
rewards, computes the expected gradient by exact enumeration (finite-group theory), and words the
likely cause from the combination of what broke.

Verdict and exit code: ``error`` (2) when the function does not run (it raises on every
probe of plain rewards, or returns None, a non-tensor or the wrong shape); ``broken`` (1)
on an error-severity violation or an ``expect`` that does not fit; else ``ok`` (0, a
registry entry matches) or ``consistent`` (0, nothing breaks but no entry matches). What
the matched entry's own output breaks on a batch, and float32 rounding, are warnings.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from ...config import Tolerances
from ...estimators import get
from ...invariants.probes import PERMUTATION
from ...strict_json import json_safe
from .. import theory
from . import precision, probes, registry
from .causes import CAUSES, apply_causes, expectation_cause, structural_causes
from .probes import DTYPES, UNIT_SCALE, AdvantageFn, Match, Probe, ProbeResult

#: Notes on NaN handling that are not violations.
NAN_NOTES = {
    "propagates": "NaN rewards propagate to NaN advantages: score or mask unscorable responses before calling it",
    "raises": "the function raises on NaN rewards: score or mask unscorable responses before calling it",
    "group_dropped": "a group holding a NaN reward gets advantage 0 everywhere: its scorable responses are wasted",
}
#: Above this x typical |advantage| a constant group's residue is an error (the monitor's own threshold).
RESIDUE_ERROR = Tolerances().degenerate_error


@dataclasses.dataclass
class AuditResult:
    """The audit of one function (see :func:`audit`); ``to_dict()`` is the ``--json`` output.

    ``verdict`` is ``ok``, ``consistent``, ``broken`` or ``error`` (``error`` says why);
    ``inferred`` names the best registry match and ``matches`` every entry that reproduces
    the function, best first; ``expected``/``expected_fits`` the ``--expect`` check;
    ``causes`` the likely causes of what broke. Each violation carries its ``severity``.
    """

    function: str
    group_size: int
    verdict: str
    error: str | None
    inferred: str | None
    matches: list[str]
    match: dict[str, Any] | None
    expected: str | None
    expected_fits: bool | None
    causes: list[str]
    convention: str
    stabilizer: float | None
    equivariant: bool | None
    batch_independent: bool | None
    nan_rows: str
    scale: dict[str, float]
    violations: list[dict[str, Any]]
    notes: list[str]
    gradient: list[dict[str, Any]]
    probes: list[ProbeResult]
    dtypes: tuple[str, ...] = tuple(DTYPES)

    @property
    def exit_code(self) -> int:
        """2 when the function does not run, 1 when it is broken, else 0."""
        return {"error": 2, "broken": 1}.get(self.verdict, 0)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values (``None`` for infinite or undefined numbers)."""
        return json_safe({**dataclasses.asdict(self), "exit_code": self.exit_code})


# -------------------------------------------------------------------- severities
def excuse_by_design(results: list[ProbeResult], match: Match, batches: dict[str, Probe], runs64: dict, G: int,
                     components: int | None = None) -> dict[int, str]:
    """Warnings, not errors: what the matched entry's own output breaks on a probe the function reproduces it on
    (a reward clip, verl's one-row groups). Outside the entry's reward domain they stay errors, as the live
    monitor has them, with the entry named: those hints, by ``id`` of the violation (no other cause applies)."""
    named: dict[int, str] = {}
    est = get(match.name)
    by_probe = {(p.name, p.dtype): p for p in results}
    for name, probe in batches.items():
        errors = {v["invariant"] for v in _errors(by_probe[(name, "float64")])}
        if not errors:
            continue
        r = probe.rewards
        data = probes.reward_components(r, components).reshape(len(r) * G, -1) if est.multi_reward and components \
            else r.reshape(-1)
        try:
            ref = torch.from_numpy(est(data.numpy(), np.repeat(np.arange(len(r)), G), **match.params))
        except ValueError:  # the entry refuses this batch (e.g. pass@k on a group of one)
            continue
        if probes.relative(runs64[name][1].reshape(-1), ref) > registry.MATCH_TOL:
            continue
        shown = errors & {v.invariant for v in probes.monitor_report(r, ref.view_as(r), G, None, components).violations}
        if _outside_domain(est.reward_domain, r):  # the live monitor stops such a run: so does the audit
            hint = (f"{match.name} itself does this on rewards outside its {est.reward_domain} domain "
                    f"({est.description}): a run with such rewards trains against its reward")
            severity = "error"
        else:
            hint = f"{match.name} itself does this on these rewards ({est.description}): not a bug of the function"
            severity = "warning"
        for v in (v for d in DTYPES for v in by_probe[(name, d)].violations if v["invariant"] in shown):
            v.update(severity=severity, hint=hint)
            named.update({id(v): hint} if severity == "error" else {})
    return named


def _outside_domain(domain: str, rewards: torch.Tensor) -> bool:
    """Whether a probe's rewards leave an entry's reward domain ("real" or "nonnegative")."""
    return domain == "nonnegative" and bool((torch.nan_to_num(rewards, nan=0.0) < 0).any())


def judge_rounding(fn: AdvantageFn, results: list[ProbeResult], runs: dict[str, dict], batches: dict[str, Probe]
                   ) -> None:
    """Float32 rounding is a warning where it explains a breach, and is named only then (see :data:`CAUSES`)."""
    by_probe = {(p.name, p.dtype): p for p in results}
    exact = not _errors(by_probe[("binary", "float64")], "degenerate_zero")  # 0/1 constants: exact in any dtype
    for name, probe in batches.items():
        p64, p32 = by_probe[(name, "float64")], by_probe[(name, "float32")]
        seen64 = {v["invariant"] for v in _errors(p64)}
        a32 = runs["float32"][name][1] if name in runs["float32"] else None
        if "degenerate_zero" in seen64:
            found = [v for p in (p64, p32) for v in p.violations if v["invariant"] == "degenerate_zero"]
            cast = exact and _same(probe.rewards, a32, runs["float64"].get(name))
            _constant_cause(found, a32 if cast else None, probe)
        if a32 is None:
            continue
        r32 = probe.rewards.float()
        for v in (v for v in _errors(p32) if v["invariant"] not in seen64):
            if v["invariant"] == "degenerate_zero":
                _float32_residue(v, probes.residue_ratio(r32, a32))
            elif v["invariant"] in ("zero_group_mean", "affine_in_rewards"):
                _float32_only(v, *probes.rounding_excess(fn, r32, a32))


def _errors(p: ProbeResult, invariant: str | None = None) -> list[dict[str, Any]]:
    return [v for v in p.violations if v["severity"] == "error" and invariant in (None, v["invariant"])]


def _same(rewards: torch.Tensor, a32: torch.Tensor | None, run64: tuple | None) -> bool:
    """Whether the constant groups get the same advantages from float64 and float32 rewards (a float32 cast inside)."""
    if a32 is None or run64 is None:
        return False
    constant = rewards.amax(1) == rewards.amin(1)
    return torch.allclose(run64[1].to(torch.float64)[constant], a32.to(torch.float64)[constant], rtol=1e-3, atol=0.0)


def _constant_cause(found: list[dict[str, Any]], cast32: torch.Tensor | None, probe: Probe) -> None:
    """Constant groups breaking in float64 too: the function's own float32 cast (``cast32``, its float32 output,
    when exact 0/1 constants are fine and float32 rewards give the same), or not rounding at all (None)."""
    if cast32 is None:
        for v in found:
            v.update(severity="error", hint=CAUSES["not_rounding"])
        return
    ratio = probes.residue_ratio(probe.rewards.float(), cast32)
    for v in (v for v in found if v["severity"] == "error"):
        _float32_residue(v, ratio, " (the function computes in float32 whatever it is given)")


def _float32_residue(v: dict[str, Any], ratio: float, where: str = " (float64 rewards give exactly 0)") -> None:
    if ratio <= RESIDUE_ERROR:
        v.update(severity="warning", hint=f"float32 rounding: a constant group's mean is off by a few ulp, "
                 f"harmless at {ratio:.2g} x typical |advantage|{where}")
    else:
        v["hint"] = CAUSES["tiny_eps"] + where


def _float32_only(v: dict[str, Any], deviation: float, bound: float) -> None:
    if deviation <= bound:
        v.update(severity="warning", hint=f"float32 rounding: the float32 advantages differ from the function's "
                 f"float64 ones by {deviation:.2g} x typical |advantage|, within the {bound:.2g} rounding explains")
    else:
        v["hint"] = (f"only in float32, and beyond rounding: {deviation:.2g} x typical |advantage| from the "
                     f"function's float64 output where rounding explains {bound:.2g} (a half-precision cast or a "
                     f"one-pass variance E[r^2] - E[r]^2?)")


# -------------------------------------------------------------------------- audit
#: The largest group size the audit probes (memory and time grow as G squared; docs/reliability.md has the figures).
MAX_GROUP_SIZE = 256


def audit(fn: AdvantageFn, group_size: int = 8, *, expect: str = "auto", name: str | None = None,
          lengths: probes.LengthsFn | None = None, reward_components: int | None = None) -> AuditResult:
    """Probe ``fn`` (rewards (B, G) -> advantages (B, G)) in float64 and float32 and collect the verdicts.

    ``expect`` names the registry entry the function should reproduce (``population``,
    ``bessel``, ``trl.group``, ``verl.grpo``, ...) or a declared one of your own
    (``estimators.custom``): when it does not fit, that is an error-severity ``convention``
    violation; with ``"auto"`` the match is only reported. ``lengths`` (``rewards (B, G) ->
    token counts (B, G)``) calls ``fn(rewards, lengths=...)`` and hands the same counts to the
    monitor, so token-whitening estimators are judged as the live API judges them with ``lengths=``.
    ``reward_components`` (K) calls ``fn(rewards, reward_components=...)`` with K reward columns per
    response that sum to the probe's rewards (:func:`~grpo_monitor.tools.audit.probes.reward_components`) and
    hands them to the monitor as the live API's ``reward_components=`` (multi-reward estimators).
    """
    G = theory._check_group_size(group_size)
    if G > MAX_GROUP_SIZE:
        raise ValueError(f"Expected argument `group_size` (-G) to be an int from 2 to {MAX_GROUP_SIZE} but got {G}: "
                         "the probes grow as G squared (measured: G=256 takes about 1.1 GB and 17 s, G=1024 would "
                         "take 16 GB)")
    k = None if reward_components is None else probes.check_components(reward_components)
    if k is not None:
        fn = probes.with_components(fn, k)
    if lengths is not None:
        fn = probes.with_lengths(fn, lengths)
    if expect != "auto" and get(expect).multi_reward and k is None:
        raise ValueError(f"expect={expect!r} takes several reward columns; pass reward_components=K "
                         "(--reward-components K) to probe with K reward columns per response")
    label = name or str(getattr(fn, "__qualname__", repr(fn)))
    batches = {p.name: p for p in probes.make_probes(G)}
    results: list[ProbeResult] = []
    runs: dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]] = {d: {} for d in DTYPES}
    for probe in batches.values():
        for dtype in DTYPES:
            result, adv = probes.run_probe(fn, probe, dtype, G, lengths, k)
            results.append(result)
            if adv is not None:
                runs[dtype][probe.name] = (probe.rewards, adv)
    failure = _does_not_run(results)
    if failure:
        return AuditResult(
            function=label, group_size=G, verdict="error", error=f"the function does not run: {failure}",
            inferred=None, matches=[], match=None, expected=None if expect == "auto" else expect,
            expected_fits=None, causes=[], convention="custom", stabilizer=None, equivariant=None,
            batch_independent=None, nan_rows="n/a", scale={}, violations=[], notes=[], gradient=[],
            probes=results)
    return _judge(fn, label, G, expect, batches, results, runs, k)


def _does_not_run(results: list[ProbeResult]) -> str | None:
    """Why the function does not run: a broken contract anywhere, or an error on every probe of plain rewards."""
    broken = next((p for p in results if p.contract), None)
    if broken:
        return f"{broken.error} (probe {broken.name}, {broken.dtype})"
    core = [p for p in results if p.name in UNIT_SCALE]
    if all(p.error for p in core):
        return f"{core[0].error} (on every probe of 0/1 and of continuous rewards, in float64 and float32)"
    return None


def _judge(fn: AdvantageFn, label: str, G: int, expect: str, batches: dict[str, Probe],
           results: list[ProbeResult], runs: dict[str, dict], components: int | None = None) -> AuditResult:
    """Everything after the probes ran: match, severities, extra checks, causes, verdict."""
    notes: list[str] = []
    nan_by_dtype = {d: probes.nan_verdict(next(p for p in results if (p.name, p.dtype) == ("nan_rows", d)),
                                   runs[d].get("nan_rows", (None, None))[1], batches["nan_rows"].rewards)
                    for d in DTYPES}
    if len(set(nan_by_dtype.values())) > 1:
        notes.append(f"NaN rewards are handled differently by dtype: {nan_by_dtype}")
    nan_rows = nan_by_dtype["float64"]
    runs64 = {k: (r, a.to(torch.float64)) for k, (r, a) in runs["float64"].items()}
    rows = registry.replay_rows(runs64, components=components)
    matches = registry.registry_matches(rows)
    named = excuse_by_design(results, matches[0], batches, runs64, G, components) if matches else {}
    judge_rounding(fn, results, runs, batches)
    notes += precision.name_saturation(results, runs, batches, named)
    violations = [v for p in results for v in p.violations if _counts(p.name, v["invariant"], nan_by_dtype[p.dtype])]
    violations += [_raised(p) for p in results if p.error and p.name != "nan_rows"]
    checks = _extra_checks(fn, batches, runs64, violations)
    descriptions = {n: p.description for n, p in batches.items()}
    errors = any(v["severity"] == "error" for v in violations)
    structural = (structural_causes(checks["equivariant"], checks["batch_independent"],
                                    (rows, registry.replay_rows(runs64, sign=-1.0, components=components)),
                                    descriptions) if errors else {})
    causes = apply_causes([v for v in violations if id(v) not in named], structural, nan_rows)
    fits = None if expect == "auto" else registry.expected_fits(expect, rows)
    if fits is False:
        _expect_violation(expect, matches, violations)
    causes += [h for h in dict.fromkeys(v["hint"] for v in violations if v["severity"] == "error") if h not in causes]
    notes += [NAN_NOTES[nan_rows]] if nan_rows in NAN_NOTES else []
    if not matches and not errors and (near := registry.near_match(rows, descriptions)):
        notes.append(f"no registry entry reproduces it exactly; {near}")
    broken, best = any(v["severity"] == "error" for v in violations), (matches[0] if matches else None)
    return AuditResult(
        function=label, group_size=G, verdict="broken" if broken else "ok" if matches else "consistent", error=None,
        inferred=best.name if best else None, matches=[m.name for m in matches],
        match={**dataclasses.asdict(best), "text": registry.describe(best)} if best else None,
        expected=None if expect == "auto" else expect, expected_fits=fits, causes=causes,
        **_convention([p for p in results if p.dtype == "float64"], notes), **checks, nan_rows=nan_rows,
        violations=violations, notes=notes, gradient=probes.gradient_table(fn, G) if "binary" in runs64 else [],
        probes=results)


def _extra_checks(fn: AdvantageFn, batches: dict[str, Probe], runs64: dict, violations: list) -> dict[str, Any]:
    """Permutation equivariance, batch independence and scale response on the float64 plain-reward probes."""
    if "binary" not in runs64 or "continuous" not in runs64:
        return {"equivariant": None, "batch_independent": None, "scale": {}}
    mixed = torch.cat([batches["binary"].rewards, batches["continuous"].rewards])
    try:
        eq, alone = probes.equivariance_error(fn, mixed), probes.batch_dependence(fn, mixed)
        scale = probes.scale_response(fn, batches["continuous"].rewards)
        tol = precision.equivariance_tolerance(fn, batches["continuous"].rewards)
    except Exception as exc:  # noqa: BLE001 - e.g. a batch size baked into the function
        violations.append(probes.finding("permutation", "float64", "runs", f"{type(exc).__name__}: {exc}",
                                  "advantages for any batch size", "the function fails on a batch of another size "
                                  "(34 groups, or one group alone): a batch or group size baked in?"))
        return {"equivariant": None, "batch_independent": None, "scale": {}}
    if eq > tol:
        violations.append(probes.finding("permutation", "float64", PERMUTATION.name,
                                  f"relative change {eq:.3g} when responses are permuted within groups (the "
                                  f"function's own precision allows {tol:.2g})",
                                  PERMUTATION.expected(None), PERMUTATION.hint))
    return {"equivariant": eq <= tol, "batch_independent": alone <= tol, "scale": scale}


def _expect_violation(expect: str, matches: list[Match], violations: list[dict[str, Any]]) -> None:
    cause = expectation_cause(expect, matches[0] if matches else None)
    violations.append(probes.finding("registry", "float64", "convention", f"{expect} does not reproduce the "
                                     "function on the float64 probes",
                                     f"the advantages of {expect} ({get(expect).description})", cause))


def _raised(p: ProbeResult) -> dict[str, Any]:
    where = " in float32, what trainers pass" if p.dtype == "float32" else ""
    return probes.finding(p.name, p.dtype, "runs", p.error or "", "advantages for every probe batch",
                   f"the function fails on some reward batches{where}")


def _convention(results: list[ProbeResult], notes: list[str]) -> dict[str, Any]:
    """The monitor's classic convention on the unit-scale float64 probes (``custom`` when they disagree)."""
    unit = [p for p in results if p.name in UNIT_SCALE and p.error is None]
    found = {p.name: p.convention for p in unit}
    names = set(found.values())
    if not unit or None in names or len(names) != 1:
        if len(names) > 1:
            notes.append(f"probes disagree on the convention: {found}")
        return {"convention": "custom", "stabilizer": None}
    name = names.pop()
    return {"convention": name, "stabilizer": unit[0].stabilizer if name in ("population", "bessel") else None}


def _counts(probe: str, invariant: str, nan_rows: str) -> bool:
    """Whether a probe's violation is a verdict on the function (see module docstring)."""
    if invariant == "convention" and probe not in UNIT_SCALE:
        return False  # the stabilizer legitimately dominates at tiny scales; judged at unit scale only
    if probe == "nan_rows" and nan_rows in ("propagates", "raises", "group_dropped"):
        return False  # loud or a deliberate skip, not a silent error: reported as a note
    return True
