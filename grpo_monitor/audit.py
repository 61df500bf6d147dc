"""Audit a user's advantage function ``rewards (B, G) -> advantages (B, G)`` with crafted batches.

Each probe batch goes through a fresh :class:`GRPOMonitor` (policy ``"ignore"``): the
invariant checks and the convention inference are the monitor's own. On top, the audit
checks permutation equivariance within groups, independence from the rest of the batch,
the handling of NaN (unscorable) rewards and the sensitivity to the reward scale, and
computes the expected gradient by exact enumeration over success counts (seed 000).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import math
import os
import sys
import warnings
from typing import Any, Callable

import torch

from . import theory
from .config import MonitorConfig
from .monitor import GRPOMonitor
from .strict_json import json_safe

AdvantageFn = Callable[[torch.Tensor], Any]
#: Success probabilities of the expected-gradient table.
P_GRID: tuple[str, ...] = ("0.01", "0.05", "0.1", "0.25", "0.5", "0.75", "0.9", "0.99")
#: Notes on NaN handling that are not violations.
NAN_NOTES = {
    "propagates": "NaN rewards propagate to NaN advantages: score or mask unscorable responses before calling it",
    "raises": "the function raises on NaN rewards: score or mask unscorable responses before calling it",
    "group_dropped": "a group holding a NaN reward gets advantage 0 everywhere: its scorable responses are wasted",
}
#: Probes whose reward scale is 1: the convention is judged on these.
UNIT_SCALE = ("binary", "continuous")


@dataclasses.dataclass
class ProbeResult:
    """What one probe batch showed: the monitor's verdict, or the error the function raised."""

    name: str
    description: str
    convention: str | None = None
    stabilizer: float | None = None
    violations: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    error: str | None = None


@dataclasses.dataclass
class AuditResult:
    """The audit of one function (see :func:`audit`); ``to_dict()`` is the ``--json`` output."""

    function: str
    group_size: int
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

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values (``None`` for infinite or undefined numbers)."""
        return json_safe(dataclasses.asdict(self))


# ---------------------------------------------------------------------- loading
def load_function(spec: str) -> AdvantageFn:
    """``MODULE:FUNCTION`` where MODULE is a dotted module (importable from the current folder) or a .py path."""
    module_part, sep, attr = spec.rpartition(":")
    if not sep or not module_part or not attr:
        raise ValueError(f"expected MODULE:FUNCTION (e.g. mypkg.adv:grpo_advantages or ./adv.py:fn), got {spec!r}")
    if module_part.endswith(".py") or os.sep in module_part or "/" in module_part:
        if not os.path.isfile(module_part):
            raise ValueError(f"module file {module_part!r} does not exist")
        name = f"_grpo_audit_{os.path.splitext(os.path.basename(module_part))[0]}"
        loader = importlib.util.spec_from_file_location(name, module_part)
        module = importlib.util.module_from_spec(loader)
        sys.modules[name] = module
        loader.loader.exec_module(module)
    else:
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = importlib.import_module(module_part)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{module_part!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{spec!r} is not callable: got {type(obj).__name__}")
    return obj


# ----------------------------------------------------------------------- probes
def make_probes(G: int, seed: int = 0) -> list[tuple[str, str, torch.Tensor]]:
    """(name, description, rewards (B, G)) of every probe batch."""
    gen = torch.Generator().manual_seed(seed)
    binary = torch.stack([_row_with(K, G, gen) for K in range(G + 1) for _ in range(2)])
    continuous = torch.randn(16, G, generator=gen, dtype=torch.float64)
    consts = torch.tensor([0.7, 1 / 3, 0.3, 0.9], dtype=torch.float32)[:, None].expand(4, G)
    live32 = torch.where(binary[1:2 * G - 1] > 0, 0.7, 0.2).to(torch.float32)
    nan_rows = binary.clone()
    nan_rows[2:2 * G:2, 0] = torch.nan  # one unscorable response in every other group
    nan_rows[3, :2] = torch.nan
    return [
        ("binary", f"0/1 rewards at every success count K = 0..{G}, shuffled within groups", binary),
        ("continuous", "standard-normal rewards", continuous),
        ("float32_constant", "float32 groups of non-dyadic constants (0.7, 1/3, 0.3, 0.9) among 0.7/0.2 groups",
         torch.cat([consts, live32])),
        ("nan_rows", "0/1 rewards with NaN (unscorable) responses in some groups", nan_rows),
        ("offset", "continuous rewards + 1e6", continuous + 1e6),
        ("scale_up", "continuous rewards x 1e4", continuous * 1e4),
        ("scale_down", "continuous rewards x 1e-4", continuous * 1e-4),
    ]


def _row_with(K: int, G: int, gen: torch.Generator) -> torch.Tensor:
    row = torch.zeros(G, dtype=torch.float64)
    row[torch.randperm(G, generator=gen)[:K]] = 1.0
    return row


def _call(fn: AdvantageFn, rewards: torch.Tensor) -> torch.Tensor:
    """``fn(rewards)`` as a tensor of the rewards' shape, or a worded ValueError (its warnings muted)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fn(rewards.clone())
    out = torch.as_tensor(out.detach() if isinstance(out, torch.Tensor) else out)
    if out.numel() != rewards.numel():
        raise ValueError(f"returned shape {tuple(out.shape)} for rewards of shape {tuple(rewards.shape)}")
    return out.reshape(rewards.shape)


def run_probe(fn: AdvantageFn, name: str, description: str, rewards: torch.Tensor, G: int, expect: str) -> ProbeResult:
    """One probe: the function's advantages through a fresh monitor (policy 'ignore')."""
    result = ProbeResult(name, description)
    try:
        adv = _call(fn, rewards)
    except Exception as exc:  # noqa: BLE001 - the user's function may fail in any way
        result.error = f"{type(exc).__name__}: {exc}"
        return result
    mon = GRPOMonitor(MonitorConfig(group_size=G, on_violation="ignore", std_convention=expect, strict=True))
    mon.observe_rollout(rewards, advantages=adv)
    report = mon.end_step()
    result.convention = report.convention
    result.stabilizer = report.metrics.get("grpo/adv/stabilizer")
    for v in report.violations:
        rows = [g for g in v.groups if isinstance(g, int)][:1]
        example = {"rewards": _short(rewards[rows[0]]), "advantages": _short(adv[rows[0]])} if rows else None
        result.violations.append({"probe": name, "invariant": v.invariant, "observed": str(v.observed),
                                  "expected": str(v.expected), "hint": v.hint, "example": example})
    return result


def _short(t: torch.Tensor) -> list[float]:
    return [float(f"{x:.6g}") for x in t.to(torch.float64).tolist()]


# ------------------------------------------------------------------- extra checks
def equivariance_error(fn: AdvantageFn, rewards: torch.Tensor, seed: int = 1) -> float:
    """Max |f(r permuted within each row) - f(r) permuted| relative to max |f(r)| (independent row permutations)."""
    gen = torch.Generator().manual_seed(seed)
    perm = torch.stack([torch.randperm(rewards.shape[1], generator=gen) for _ in range(len(rewards))])
    base = _call(fn, rewards).to(torch.float64)
    moved = _call(fn, rewards.gather(1, perm)).to(torch.float64)
    return _relative(moved, base.gather(1, perm))


def batch_dependence(fn: AdvantageFn, rewards: torch.Tensor) -> float:
    """Max difference between each group's advantages in the batch and alone, relative to max |advantage|."""
    whole = _call(fn, rewards).to(torch.float64)
    alone = torch.cat([_call(fn, rewards[i:i + 1]).to(torch.float64) for i in range(len(rewards))])
    return _relative(alone, whole)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    scale = b.abs().nan_to_num(0.0).max().clamp(min=1e-300)
    diff = (a - b).abs()
    same_nan = torch.isnan(a) & torch.isnan(b)
    return float(torch.where(same_nan, 0.0, diff.nan_to_num(math.inf)).max() / scale)


def scale_response(fn: AdvantageFn, rewards: torch.Tensor) -> dict[str, float]:
    """Median |advantage| ratio when the rewards are scaled by 1e-4 and 1e4 (1.0: scale invariant)."""
    base = _call(fn, rewards).to(torch.float64).abs().median()
    out = {}
    for factor in (1e-4, 1e4):
        scaled = _call(fn, rewards * factor).to(torch.float64).abs().median()
        out[f"x{factor:g}"] = float(scaled / base) if base > 0 else math.nan
    return out


def nan_verdict(probe: ProbeResult, fn: AdvantageFn, rewards: torch.Tensor) -> str:
    """How unscorable (NaN-reward) rows are treated.

    ``excluded``: they get 0 and stay out of their group's statistics (correct);
    ``counted``: finite advantages that break an invariant (silently wrong, a violation);
    ``group_dropped``: every advantage of a group holding a NaN is 0 (the group is skipped);
    ``propagates``: NaN advantages come out (loud); ``raises``: the function raised.
    """
    if probe.error:
        return "raises"
    adv = _call(fn, rewards).to(torch.float64)
    if not torch.isfinite(adv).all():
        return "propagates"
    with_nan = torch.isnan(rewards).any(dim=1)
    if bool((adv[with_nan] == 0).all()):
        return "group_dropped"
    wrong = {"unscorable_rows", "zero_group_mean", "affine_in_rewards"}
    return "counted" if any(v["invariant"] in wrong for v in probe.violations) else "excluded"


def gradient_table(fn: AdvantageFn, G: int) -> list[dict[str, Any]]:
    """Expected gradient of ``fn`` against the true ``p(1-p)`` by exact enumeration (seed 000).

    ``function`` and ``ratio`` are None, with ``error`` set, where the expectation is
    undefined (e.g. NaN advantages on an all-equal group).
    """
    rows = []
    for p in P_GRID:
        true = float(theory.expected_gradient(p, G, "true"))
        row: dict[str, Any] = {"p": float(p), "true": true, "function": None, "ratio": None}
        try:
            value = theory.expected_gradient_of(lambda r: _call(fn, r), p, G)
            row.update(function=value, ratio=value / true)
        except Exception as exc:  # noqa: BLE001
            row["error"] = f"{type(exc).__name__}: {exc}"
        rows.append(row)
    return rows


# -------------------------------------------------------------------------- audit
def audit(fn: AdvantageFn, group_size: int = 8, *, expect: str = "auto", name: str | None = None) -> AuditResult:
    """Probe ``fn`` (rewards (B, G) -> advantages (B, G)) and collect the verdicts.

    ``expect`` declares a convention (``population``, ``bessel``, ...): a mismatch is then a
    ``convention`` violation; with ``"auto"`` the convention is only reported.
    """
    G = theory._check_group_size(group_size)
    batches = {n: r for n, _, r in make_probes(G)}
    probes = [run_probe(fn, n, d, r, G, expect) for n, d, r in make_probes(G)]
    by_name = {p.name: p for p in probes}
    notes = [f"probe {p.name} raised {p.error}" for p in probes if p.error and p.name != "nan_rows"]
    convention, stabilizer = _convention(probes, notes)
    nan_rows = nan_verdict(by_name["nan_rows"], fn, batches["nan_rows"])
    violations = [v for p in probes for v in p.violations if _counts(p.name, v["invariant"], nan_rows)]
    equivariant = batch_independent = None
    scale: dict[str, float] = {}
    usable = by_name["binary"].error is None and by_name["continuous"].error is None
    if usable:
        mixed = torch.cat([batches["binary"], batches["continuous"]])
        eq = equivariance_error(fn, mixed)
        equivariant = eq <= 1e-6
        batch_independent = batch_dependence(fn, mixed) <= 1e-6
        scale = scale_response(fn, batches["continuous"])
        if not equivariant:
            violations.append({"probe": "permutation", "invariant": "permutation_equivariance",
                               "observed": f"relative change {eq:.3g} when responses are permuted within groups",
                               "expected": "advantages follow their responses under any within-group permutation",
                               "hint": "rows misaligned with rewards, or statistics over the wrong axis", "example": None})
    notes += [NAN_NOTES[nan_rows]] if nan_rows in NAN_NOTES else []
    return AuditResult(
        function=name or getattr(fn, "__qualname__", repr(fn)), group_size=G, convention=convention,
        stabilizer=stabilizer, equivariant=equivariant, batch_independent=batch_independent, nan_rows=nan_rows,
        scale=scale, violations=violations, notes=notes, gradient=gradient_table(fn, G) if usable else [],
        probes=probes,
    )


def _convention(probes: list[ProbeResult], notes: list[str]) -> tuple[str, float | None]:
    unit = [p for p in probes if p.name in UNIT_SCALE and p.error is None]
    found = {p.name: p.convention for p in unit}
    names = set(found.values())
    if not unit or None in names or len(names) != 1:
        if len(names) > 1:
            notes.append(f"probes disagree on the convention: {found}")
        return "custom", None
    name = names.pop()
    stab = unit[0].stabilizer if name in ("population", "bessel") else None
    return name, stab


def _counts(probe: str, invariant: str, nan_rows: str) -> bool:
    """Whether a probe's violation is a verdict on the function (see module docstring)."""
    if invariant == "convention" and probe not in UNIT_SCALE:
        return False  # the stabilizer legitimately dominates at tiny scales; judged at unit scale only
    if probe == "nan_rows" and nan_rows in ("propagates", "raises", "group_dropped"):
        return False  # loud or a deliberate skip, not a silent error: reported as a note
    return True
